"""Deleting session-file folders older than SESSION_FILES_TTL_HOURS (`cleanup_files` command,
and the hourly `tasks.cleanup_session_files` job the job workers queue)."""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings

from navi_project import fstree

from .models import SessionFile

log = logging.getLogger(__name__)

CLEANUP_INTERVAL_S = 3600.0


@dataclass
class StaleFolder:
    path: Path
    age_hours: float


def newest_mtime(folder: Path) -> float:
    """The folder's own mtime or its newest file's, whichever is later (symlinks not followed)."""
    newest = folder.lstat().st_mtime
    for path in fstree.entries_under(folder):
        try:
            newest = max(newest, path.lstat().st_mtime)
        except OSError:
            continue
    return newest


def stale_folders(now: float | None = None) -> list[StaleFolder]:
    """Session folders (UUID-named directories) untouched for longer than the TTL."""
    root = Path(settings.SESSION_FILES_DIR)
    if not root.is_dir():
        return []
    now = time.time() if now is None else now
    ttl_s = settings.SESSION_FILES_TTL_HOURS * 3600
    found = []
    for folder in sorted(root.iterdir()):
        if folder.is_symlink() or not folder.is_dir() or not _is_uuid(folder.name):
            continue
        age = now - newest_mtime(folder)
        if age > ttl_s:
            found.append(StaleFolder(folder, age / 3600))
    return found


def cleanup_session_files(*, dry_run: bool = False, now: float | None = None) -> list[StaleFolder]:
    """Delete stale folders and their SessionFile rows; returns what was (or would be) deleted."""
    stale = stale_folders(now)
    if dry_run:
        return stale
    for item in stale:
        fstree.rmtree(item.path, ignore_errors=True)
        SessionFile.objects.filter(session_id=item.path.name).delete()
    return stale


def _is_uuid(name: str) -> bool:
    try:
        uuid.UUID(name)
    except ValueError:
        return False
    return True
