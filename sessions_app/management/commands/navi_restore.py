from __future__ import annotations

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError
from django.db import DatabaseError

from sessions_app.backup import BackupError, restore


class Command(BaseCommand):
    help = (
        "Restore a navi_backup archive into this install's database and folders (DATABASE_URL / "
        "DB_PATH, SESSION_FILES_DIR, TOOLS_DIR, SSH_HOSTS_FILE). They must be empty unless --force. "
        "Stop the server first."
    )

    def add_arguments(self, parser):
        parser.add_argument("path", help="the .tar.gz written by navi_backup")
        parser.add_argument("--force", action="store_true", help="replace a database and folders that hold data")

    def handle(self, *args, path: str, force: bool, **options):
        try:
            restore(Path(path).expanduser().resolve(), force=force, say=self.stdout.write)
        except BackupError as exc:
            raise CommandError(str(exc)) from exc
        except DatabaseError as exc:
            raise CommandError(
                f"writing the database failed ({exc}); nothing was loaded (one transaction). Check "
                "DATABASE_URL / DB_PATH and that the database user may create tables, then try again"
            ) from exc
        except OSError as exc:
            raise CommandError(f"{exc}; check the target folders' permissions and free disk space, then try again") from exc
        self.stdout.write("==> done: start the server (make run) and sign in with the backed-up accounts")
