"""`python manage.py extract_memory [--session ID] [--all] [--dry-run]`: stale sessions → facts."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from agent.memory.extraction import extract_session
from memory_app.extraction import stale_sessions
from sessions_app.models import Session


class Command(BaseCommand):
    help = "Extract long-term memory facts from stale sessions (idle > 30 min, not extracted since)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--session", help="extract this session only (even if it is not stale)")
        parser.add_argument("--all", action="store_true", help="every session, stale or not")
        parser.add_argument("--dry-run", action="store_true", help="print the facts found; save nothing")

    def handle(self, *args, session=None, all=False, dry_run=False, **options) -> None:  # noqa: A002
        if session:
            rows = Session.objects.filter(pk=session) if _valid_uuid(session) else Session.objects.none()
            if not rows.exists():
                raise CommandError(f"no session {session!r}; list sessions with GET /sessions or in the admin")
        else:
            rows = stale_sessions(include_fresh=all)
        rows = list(rows.select_related("profile"))
        processed = failed = facts = 0
        for index, row in enumerate(rows, 1):
            prefix = f"[{index}/{len(rows)}] {row.pk} {row.title[:40]!r}"
            try:
                result = extract_session(row, dry_run=dry_run)
            except Exception as exc:
                failed += 1
                self.stderr.write(f"{prefix}: failed: {exc}")
                continue
            processed += 1
            facts += len(result.facts)
            detail = result.skipped or f"{len(result.facts)} fact(s), {result.saved} new/changed, {result.malformed} malformed line(s)"
            self.stdout.write(f"{prefix}: {detail}")
            if dry_run:
                for category, key, value in result.facts:
                    self.stdout.write(f"    {category}: {key} = {value}")
        verb = "would be saved" if dry_run else "found"
        self.stdout.write(
            self.style.SUCCESS(f"{processed} session(s) processed, {failed} failed, {facts} fact(s) {verb}")
        )


def _valid_uuid(value: str) -> bool:
    import uuid

    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True
