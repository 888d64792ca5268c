from __future__ import annotations

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError
from django.db import DatabaseError

from sessions_app.backup import BackupError, backup, verify_archive


class Command(BaseCommand):
    help = (
        "Write one .tar.gz with a consistent copy of the database (safe while the server runs), "
        "the session files, user tools and ssh_hosts.json. Restore it with navi_restore."
    )

    def add_arguments(self, parser):
        parser.add_argument("path", help="the archive to write, or a folder (a dated name is chosen)")
        parser.add_argument(
            "--verify", action="store_true",
            help="after writing, test-restore the archive into a temporary folder (restore's checks) and "
            "compare its database and files with the manifest",
        )
        parser.add_argument(
            "--verify-only", action="store_true", help="write nothing: test-restore the existing archive at PATH"
        )

    def handle(self, *args, path: str, verify: bool, verify_only: bool, **options):
        target = Path(path).expanduser().resolve()
        try:
            if verify_only:
                if not target.is_file():
                    raise BackupError(f"no archive at {target}; pass the .tar.gz that navi_backup wrote")
                verify_archive(target, say=self.stdout.write)
            else:
                backup(target, say=self.stdout.write, warn=self._warn, verify=verify)
        except BackupError as exc:
            raise CommandError(str(exc)) from exc
        except DatabaseError as exc:
            raise CommandError(
                f"reading the database failed ({exc}); check DATABASE_URL / DB_PATH and that "
                "`python manage.py migrate` has been run, then try again"
            ) from exc
        except OSError as exc:
            raise CommandError(f"{exc}; check the path, its permissions and the free disk space, then try again") from exc

    def _warn(self, message: str) -> None:
        self.stderr.write(self.style.WARNING(message))
