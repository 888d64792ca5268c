"""The database and key files are readable by their owner only (issue #35 item 6): an owner's
stdio MCP server (or any local account) once read the live navi.db because it was 0644."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

SCRIPT = """
import os, sys
os.umask(0o022)  # the usual umask: SQLite alone would make the files 0644
import django
django.setup()
from django.core.management import call_command
from django.db import connection
call_command("migrate", verbosity=0)
with connection.cursor() as cursor:  # a write, with the connection still open: -wal and -shm exist
    cursor.execute("CREATE TABLE IF NOT EXISTS probe (x)")
    cursor.execute("INSERT INTO probe VALUES (1)")
name = connection.settings_dict["NAME"]
for path in (name, f"{name}-wal", f"{name}-shm"):
    print(path, oct(os.stat(path).st_mode & 0o777))
"""


def _run(env_extra: dict) -> dict[str, int]:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "DB_PATH")}
    env.update(DJANGO_SETTINGS_MODULE="navi_project.settings", SECRET_KEY="x" * 50, **env_extra)
    out = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return {line.split()[0]: int(line.split()[1], 8) for line in out.stdout.splitlines() if line.strip()}


def test_a_new_sqlite_database_and_its_wal_files_are_owner_only(tmp_path):
    modes = _run({"DB_PATH": str(tmp_path / "navi.db")})
    assert set(modes) == {str(tmp_path / n) for n in ("navi.db", "navi.db-wal", "navi.db-shm")}
    assert all(mode == 0o600 for mode in modes.values()), {k: oct(v) for k, v in modes.items()}


def test_an_existing_world_readable_database_is_tightened_at_start(tmp_path):
    db = tmp_path / "navi.db"
    _run({"DB_PATH": str(db)})
    for path in tmp_path.iterdir():
        path.chmod(0o644)  # as an older version left it
    modes = _run({"DB_PATH": str(db)})
    assert all(mode == 0o600 for mode in modes.values()), {k: oct(v) for k, v in modes.items()}


def test_an_existing_world_readable_key_file_is_tightened(tmp_path):
    from navi_project import settings as navi_settings

    key = tmp_path / ".navi_secret_key"
    key.write_text("old-key")
    key.chmod(0o644)
    navi_settings._owner_only(key)
    assert stat.S_IMODE(key.stat().st_mode) == 0o600 and key.read_text() == "old-key"
