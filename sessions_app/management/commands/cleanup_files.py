"""`python manage.py cleanup_files [--dry-run]`: delete session-file folders older than the TTL."""

from __future__ import annotations

from django.conf import settings
from django.core.management.base import BaseCommand

from sessions_app.cleanup import cleanup_session_files


class Command(BaseCommand):
    help = "Delete uploaded session files older than SESSION_FILES_TTL_HOURS (and their records)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--dry-run", action="store_true", help="only list what would be deleted")

    def handle(self, *args, dry_run: bool = False, **options) -> None:
        removed = cleanup_session_files(dry_run=dry_run)
        verb = "would delete" if dry_run else "deleted"
        for item in removed:
            self.stdout.write(f"{verb} {item.path} (idle {item.age_hours:.1f}h)")
        self.stdout.write(
            self.style.SUCCESS(
                f"{len(removed)} folder(s) {verb}; TTL is {settings.SESSION_FILES_TTL_HOURS}h "
                f"in {settings.SESSION_FILES_DIR}"
            )
        )
