"""Backup and restore of a whole Navi: the database, session files, user tools, ssh_hosts.json.

One `.tar.gz`:

    manifest.json       format, version, database vendor, time, row and file counts, source folders
    database.sqlite3    SQLite: a snapshot by the online backup API (itself a working navi.db)
    database.json       PostgreSQL: every row of Navi's tables, read in one REPEATABLE READ
                        transaction (Django's serializer, natural keys for users/permissions)
    <parts>             what apps above add (`register_part`): knowledge_app's `vectors.bin`, the
                        embeddings of passages and facts, so a restore does not embed them again
    session_files/  user_tools/  ssh_hosts.json

Only plain files and folders go in, and restore unpacks nothing else (`backup_members`): a link,
fifo or device in a folder is left out with a warning naming it, a hard-linked file is stored as
a plain copy. `navi_backup --verify` test-restores the archive it wrote into a temporary folder.

Both snapshots are consistent while the server writes. PostgreSQL is dumped as JSON rather than
by `pg_dump` because that needs a pg_dump at least as new as the server on the machine Navi runs
on, and only restores into PostgreSQL; the JSON dump needs nothing beyond Navi's requirements
and restores into either database, so a backup also moves an install from SQLite to PostgreSQL
(or back). Restore always goes through the JSON form: migrate the target, load the rows.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tarfile
import tempfile
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from django.apps import apps
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.db import DEFAULT_DB_ALIAS, connections, transaction
from django.utils import timezone

from .backup_members import (
    MAX_DEPTH,
    PART_FILES,
    FolderContents,
    UnsafeArchive,
    add_file,
    folder_contents,
    folder_info,
    unpack,
)

FORMAT = "navi.backup"
VERSION = 1
# Rebuilt by `migrate` on the target (natural keys point at them), so they are not copied.
EXCLUDED = ["contenttypes", "auth.permission"]


class BackupError(Exception):
    """A backup or restore that cannot go on; the message says what to do."""


@dataclass
class Part:
    """A member an app above adds to every backup (it is not a Django model's rows, which
    dumpdata carries). `dump(target, snapshot)` writes it from the SQLite snapshot when one is
    given, else from the live database inside the snapshot's transaction, and returns how many
    items; `load(source)` puts them back after the rows are loaded (inside that transaction)."""

    name: str
    dump: Callable[[Path, Path | None], int]
    load: Callable[[Path], int]


_parts: dict[str, Part] = {}


def register_part(part: Part) -> None:
    _parts[part.name] = part
    PART_FILES.add(part.name)  # restore unpacks it


@dataclass
class Places:
    """Where this install keeps its files (from settings)."""

    session_files: Path
    user_tools: Path
    ssh_hosts: Path

    @classmethod
    def from_settings(cls) -> Places:
        return cls(Path(settings.SESSION_FILES_DIR), Path(settings.TOOLS_DIR), Path(settings.SSH_HOSTS_FILE))


# The backup covers every app's tables; other apps' models are named, not imported (they sit
# above sessions_app in the import order).
_COUNTED = {
    "sessions": "sessions_app.Session", "messages": "sessions_app.Message", "session_files": "sessions_app.SessionFile",
    "memory_facts": "memory_app.MemoryFact", "api_tokens": "sessions_app.ApiToken", "user_tools": "tools_app.UserTool",
}


def _counted_models() -> dict:
    return {"users": get_user_model(), **{name: apps.get_model(label) for name, label in _COUNTED.items()}}


def counts() -> dict[str, int]:
    """What a user checks after a restore: rows of the tables that matter."""
    return {name: model.objects.count() for name, model in _counted_models().items()}


# --- backup ------------------------------------------------------------------------------------
def backup(
    path: Path, say: Callable[[str], None] = print, *, warn: Callable[[str], None] | None = None, verify: bool = False
) -> Path:
    """Write the archive (atomically: a temp file renamed into place), test-restore it when
    `verify`; returns its path. `warn` hears of every path left out."""
    warn = warn or say
    if path.is_dir():
        path = path / f"navi-backup-{timezone.now():%Y%m%d-%H%M%S}.tar.gz"
    if not path.parent.is_dir():
        raise BackupError(f"the folder {path.parent} does not exist; create it or pick another path")
    places = Places.from_settings()
    vendor = connections[DEFAULT_DB_ALIAS].vendor
    folders = {name: _contents(folder) for name, folder in _folders(places)}
    for contents in folders.values():
        for skipped, reason in contents.skipped:
            warn(f"warning: left out {skipped}: {reason}; restore accepts only plain files and folders, at most {MAX_DEPTH} deep")
    with tempfile.TemporaryDirectory(prefix="navi-backup-") as tmp:
        work = Path(tmp)
        if vendor == "sqlite":
            say("==> database: SQLite online backup")
            database = work / "database.sqlite3"
            _sqlite_snapshot(database)
            row_counts = _counts_of_snapshot(database)
            parts = {name: part.dump(work / name, database) for name, part in _parts.items()}
        else:
            say(f"==> database: {vendor}, rows as JSON in one REPEATABLE READ transaction")
            database = work / "database.json"
            row_counts, parts = _json_snapshot(database, work)
        manifest = {
            "format": FORMAT, "version": VERSION, "created_at": timezone.now().isoformat(), "db_vendor": vendor,
            "database": database.name, "counts": row_counts, "parts": parts,
            "source": {"session_files": str(places.session_files), "user_tools": str(places.user_tools)},
            "files": {
                **{name: len(contents.files) for name, contents in folders.items()},
                "ssh_hosts": places.ssh_hosts.is_file(),
            },
        }
        say("==> " + ", ".join(f"{n} {k.replace('_', ' ')}" for k, n in {**row_counts, **parts}.items()))
        _write_archive(path, manifest, database, places, folders, say)
    left_out = sum(len(c.skipped) for c in folders.values())
    note = f"; {left_out} path(s) left out, see the warnings" if left_out else ""
    say(f"==> backup written: {path} ({path.stat().st_size // 1024} KB{note})")
    if verify:
        verify_archive(path, say)
    return path


def _folders(places: Places) -> list[tuple[str, Path]]:
    return [("session_files", places.session_files), ("user_tools", places.user_tools)]


def _contents(folder: Path) -> FolderContents:
    return folder_contents(folder) if folder.is_dir() else FolderContents()


def _write_archive(
    path: Path, manifest: dict, database: Path, places: Places, folders: dict[str, FolderContents], say: Callable[[str], None]
) -> None:
    """The tar.gz, written to a hidden temp file renamed into place: never a half-written backup."""
    partial = path.with_name(f".{path.name}.partial")
    try:
        # Password and token hashes, SSH host details: readable by the owner only.
        with os.fdopen(os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb") as raw, \
                tarfile.open(fileobj=raw, mode="w:gz") as tar:
            _add_bytes(tar, "manifest.json", json.dumps(manifest, indent=2).encode())
            add_file(tar, database, database.name)
            for name in manifest["parts"]:
                add_file(tar, database.with_name(name), name)
            for name, folder in _folders(places):
                if folder.is_dir():
                    say(f"==> {name}: {manifest['files'][name]} file(s) from {folder}")
                    _add_folder(tar, folder, name, folders[name], say)
            if places.ssh_hosts.is_file():
                say(f"==> ssh hosts: {places.ssh_hosts}")
                add_file(tar, places.ssh_hosts, "ssh_hosts.json", follow=True)  # the setting may name a link
        partial.replace(path)
    finally:
        partial.unlink(missing_ok=True)


def _add_folder(
    tar: tarfile.TarFile, folder: Path, arcname: str, contents: FolderContents, say: Callable[[str], None]
) -> None:
    """The folder's plain files and folders; one deleted meanwhile (an expired upload) is left
    out, not fatal, and so is one swapped for a link or fifo since the walk."""
    tar.addfile(folder_info(arcname, folder.stat().st_mode))
    for item in contents.folders:
        with contextlib.suppress(FileNotFoundError):  # gone since the walk: its files are skipped too
            tar.addfile(folder_info(f"{arcname}/{item.relative_to(folder).as_posix()}", item.lstat().st_mode))
    for item in contents.files:
        try:
            add_file(tar, item, f"{arcname}/{item.relative_to(folder).as_posix()}")
        except FileNotFoundError:
            say(f"    (skipped {item}: deleted while the backup ran)")
        except UnsafeArchive as exc:
            say(f"warning: left out {item}: {exc}")


def _sqlite_snapshot(target: Path) -> None:
    """Copy the live database page by page (sqlite3 online backup API) through Django's own
    connection: consistent even while the server writes (WAL)."""
    connection = connections[DEFAULT_DB_ALIAS]
    connection.ensure_connection()
    copy = sqlite3.connect(target)
    try:
        connection.connection.backup(copy)
    finally:
        copy.close()


def _json_snapshot(target: Path, work: Path) -> tuple[dict[str, int], dict[str, int]]:
    """Every row (and the counts, and the apps' parts) as one snapshot: nothing committed
    meanwhile is half-seen."""
    connection = connections[DEFAULT_DB_ALIAS]
    with transaction.atomic(), target.open("w", encoding="utf-8") as out:
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:  # first statement of the transaction
                cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        row_counts = counts()
        _dumpdata(DEFAULT_DB_ALIAS, out)
        parts = {name: part.dump(work / name, None) for name, part in _parts.items()}
    return row_counts, parts


def _dumpdata(using: str, out) -> None:
    call_command(
        "dumpdata", database=using, format="navijson", natural_foreign=True, exclude=EXCLUDED, stdout=out, verbosity=0
    )


def _counts_of_snapshot(database: Path) -> dict[str, int]:
    tables = {name: model._meta.db_table for name, model in _counted_models().items()}
    with closing(sqlite3.connect(database)) as db:
        return {name: db.execute(f'SELECT COUNT(*) FROM "{table}"').fetchone()[0] for name, table in tables.items()}


def _snapshot_to_json(database: Path, fixture: Path) -> None:
    """The SQLite snapshot's rows as a fixture, by `dumpdata` in a child process pointed at it
    (migrated first: the backup may come from an older Navi)."""
    env = {**os.environ, "DATABASE_URL": f"sqlite:///{database}", "DJANGO_SETTINGS_MODULE": "navi_project.settings"}
    excluded = [arg for app in EXCLUDED for arg in ("--exclude", app)]
    dump = ["dumpdata", "--format", "navijson", "--natural-foreign", *excluded, "--output", str(fixture)]
    for args in (["migrate", "--noinput"], dump):
        done = subprocess.run(
            [sys.executable, str(Path(settings.BASE_DIR) / "manage.py"), *args, "--verbosity", "0"],
            env=env, capture_output=True, text=True,
        )
        if done.returncode != 0:
            raise BackupError(f"reading the SQLite snapshot failed ({args[0]}): {done.stderr.strip()[-500:]}")


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode = len(data), int(timezone.now().timestamp()), 0o600
    tar.addfile(info, io.BytesIO(data))


# --- restore -----------------------------------------------------------------------------------
def restore(path: Path, *, force: bool = False, say: Callable[[str], None] = print) -> dict[str, int]:
    """Restore the archive into this install's database and folders; returns the row counts."""
    if not path.is_file():
        raise BackupError(f"no backup at {path}; pass the .tar.gz that navi_backup wrote")
    places = Places.from_settings()
    with tempfile.TemporaryDirectory(prefix="navi-restore-") as tmp:
        work = Path(tmp)
        manifest = _unpack(path, work)
        say(f"==> backup of {manifest['created_at']} ({manifest['db_vendor']}): "
            + ", ".join(f"{n} {k.replace('_', ' ')}" for k, n in manifest["counts"].items()))
        say("==> migrating the target database")
        call_command("migrate", interactive=False, verbosity=0)
        _refuse_non_empty(places, force)
        fixture = work / "rows.navijson"  # loaddata picks the format by extension
        if manifest["database"] == "database.sqlite3":
            say("==> reading the SQLite snapshot")
            _snapshot_to_json(work / "database.sqlite3", fixture)
        else:
            (work / "database.json").rename(fixture)
        say(f"==> loading the rows into {connections[DEFAULT_DB_ALIAS].vendor}")
        with transaction.atomic():  # all or nothing: a failed load leaves the target as it was
            # Flushed even when empty, so rows a migration seeded (profiles) are exactly the backup's.
            call_command("flush", interactive=False, verbosity=0)
            call_command("loaddata", str(fixture), verbosity=0)
            _move_paths(manifest["source"], places)
            for name in manifest.get("parts", {}):  # an older backup has none: its vectors are made anew
                if name in _parts and (work / name).is_file():
                    say(f"==> {name}: {_parts[name].load(work / name)} restored")
        _copy_files(work, places, force, say)
    restored = counts()
    say("==> restored: " + ", ".join(f"{n} {k.replace('_', ' ')}" for k, n in restored.items()))
    return restored


def _copy_files(work: Path, places: Places, force: bool, say: Callable[[str], None]) -> None:
    for name, target in (("session_files", places.session_files), ("user_tools", places.user_tools)):
        if (work / name).is_dir():
            say(f"==> {name} → {target}")
            if force and target.is_dir():
                shutil.rmtree(target)
            shutil.copytree(work / name, target, dirs_exist_ok=True)
    if (work / "ssh_hosts.json").is_file():
        say(f"==> ssh hosts → {places.ssh_hosts}")
        places.ssh_hosts.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(work / "ssh_hosts.json", places.ssh_hosts)


def _unpack(path: Path, work: Path) -> dict:
    """Every member checked, then unpacked into `work`; the manifest, checked."""
    try:
        with tarfile.open(path, "r:gz") as tar:
            unpack(tar, work)  # our own checks, not tarfile's filters (which older Pythons lack)
    except UnsafeArchive as exc:
        raise BackupError(
            f"refused {path}: {exc}. Nothing was restored; navi_backup never writes such members, so the "
            "archive was changed or made by hand: restore another backup"
        ) from exc
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise BackupError(f"{path} is not a readable backup ({exc}); pass a .tar.gz written by navi_backup") from exc
    try:
        manifest = json.loads((work / "manifest.json").read_text())
    except (OSError, ValueError) as exc:
        raise BackupError(f"{path} has no valid manifest.json; is it a navi_backup archive?") from exc
    if manifest.get("format") != FORMAT or manifest.get("version") != VERSION:
        raise BackupError(
            f"{path} is format {manifest.get('format')!r} version {manifest.get('version')!r}; this Navi "
            f"restores {FORMAT} version {VERSION}: use the Navi version that wrote it"
        )
    if not (work / manifest.get("database", "")).is_file():
        raise BackupError(f"{path} lacks its database file; the archive is damaged: take a new backup")
    return manifest


# --- verify ------------------------------------------------------------------------------------
def verify_archive(path: Path, say: Callable[[str], None] = print) -> None:
    """Test-restore `path` into a temporary folder with restore's checks, then compare the
    database and files with the manifest; raises BackupError naming the problem."""
    with tempfile.TemporaryDirectory(prefix="navi-verify-") as tmp:
        work = Path(tmp)
        try:
            manifest = _unpack(path, work)
            problems = _database_problems(work, manifest) + _file_problems(work, manifest)
        except BackupError as exc:
            raise BackupError(f"verify failed: {exc}") from exc
    if problems:
        raise BackupError(
            f"verify failed: {path} does not match its manifest ({'; '.join(problems)}); do not rely on it: "
            "take a new backup"
        )
    files = sum(n for k, n in manifest["files"].items() if k != "ssh_hosts")
    say(f"==> verified: {path} unpacks as restore unpacks it; database and {files} file(s) match the manifest")


def _database_problems(work: Path, manifest: dict) -> list[str]:
    database = work / manifest["database"]
    try:
        if database.suffix == ".sqlite3":
            with closing(sqlite3.connect(f"file:{database}?mode=ro", uri=True)) as db:
                check = db.execute("PRAGMA quick_check").fetchone()[0]
            if check != "ok":
                return [f"{database.name} is damaged: {check}"]
            found = _counts_of_snapshot(database)
        else:
            found = _counts_of_fixture(database)
    except (sqlite3.Error, ValueError, OSError) as exc:
        return [f"{database.name} cannot be read: {exc}"]
    expected = manifest.get("counts", {})
    return [f"{k.replace('_', ' ')}: {found.get(k)} rows, the manifest says {n}" for k, n in expected.items()
            if found.get(k) != n]


def _counts_of_fixture(database: Path) -> dict[str, int]:
    labels = {model._meta.label_lower: name for name, model in _counted_models().items()}
    found = dict.fromkeys(labels.values(), 0)
    for row in json.loads(database.read_text(encoding="utf-8")):
        if row.get("model") in labels:
            found[labels[row["model"]]] += 1
    return found


def _file_problems(work: Path, manifest: dict) -> list[str]:
    problems = []
    for name in ("session_files", "user_tools"):
        found = sum(1 for p in (work / name).rglob("*") if p.is_file())
        if found != manifest["files"].get(name, 0):
            problems.append(f"{name}: {found} file(s), the manifest says {manifest['files'].get(name, 0)}")
    if (work / "ssh_hosts.json").is_file() != bool(manifest["files"].get("ssh_hosts")):
        problems.append("ssh_hosts.json: present and listed differ")
    problems += [f"{name}: listed but missing" for name in manifest.get("parts", {}) if not (work / name).is_file()]
    return problems


def _refuse_non_empty(places: Places, force: bool) -> None:
    """Restoring over data would mix two installs: only into an empty place, or with --force."""
    existing = {k: n for k, n in counts().items() if n}
    folders = [str(f) for f in (places.session_files, places.user_tools) if _has_own_files(f)]
    if places.ssh_hosts.is_file():
        folders.append(str(places.ssh_hosts))
    if (existing or folders) and not force:
        found = ", ".join([f"{n} {k.replace('_', ' ')}" for k, n in existing.items()] + folders)
        raise BackupError(
            f"the target is not empty ({found}). Restore into an empty database and folders (a new "
            "DB_PATH or DATABASE_URL, SESSION_FILES_DIR, TOOLS_DIR, SSH_HOSTS_FILE), or pass --force "
            "to replace all of it with the backup"
        )


def _has_own_files(folder: Path) -> bool:
    """Anything besides the template the repository ships in user_tools/."""
    if not folder.is_dir():
        return False
    return any(p.name not in ("_template.py", "__pycache__") for p in folder.iterdir())


def _move_paths(source: dict, places: Places) -> None:
    """Rows store absolute file paths: point them from the backed-up folders to this install's."""
    for model, old, new in (
        (apps.get_model("sessions_app.SessionFile"), source["session_files"], places.session_files),
        (apps.get_model("tools_app.UserTool"), source["user_tools"], places.user_tools),
    ):
        old_prefix = old.rstrip("/") + "/"
        for row in model.objects.filter(path__startswith=old_prefix):
            row.path = str(new / row.path[len(old_prefix):])
            row.save(update_fields=["path"])
