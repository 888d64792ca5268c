from __future__ import annotations

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError
from django.db import DatabaseError

from sessions_app.backup import BackupError, backup


class Command(BaseCommand):
    help = (
        "Write one .tar.gz with a consistent copy of the database (safe while the server runs), "
        "the session files, user tools and ssh_hosts.json. Restore it with navi_restore."
    )

    def add_arguments(self, parser):
        parser.add_argument("path", help="the archive to write, or a folder (a dated name is chosen)")

    def handle(self, *args, path: str, **options):
        try:
            backup(Path(path).expanduser().resolve(), say=self.stdout.write)
        except BackupError as exc:
            raise CommandError(str(exc)) from exc
        except DatabaseError as exc:
            raise CommandError(
                f"reading the database failed ({exc}); check DATABASE_URL / DB_PATH and that "
                "`python manage.py migrate` has been run, then try again"
            ) from exc
        except OSError as exc:
            raise CommandError(f"{exc}; check the path, its permissions and the free disk space, then try again") from exc
