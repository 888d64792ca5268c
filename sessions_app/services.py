"""Session lifecycle work shared by views, admin and commands."""

from __future__ import annotations

import logging
import shutil

from django.conf import settings

from .models import Session

log = logging.getLogger(__name__)

# Hooks run after a session is created (memory extraction registers one). Each is called with
# the new session and must not block: long work belongs in a background thread or task.
session_created_hooks: list = []


def session_created(session: Session) -> None:
    for hook in session_created_hooks:
        try:
            hook(session)
        except Exception:  # a hook must never break session creation
            log.exception("session_created hook %r failed", hook)


def session_files_dir(session_id) -> "object":
    return settings.SESSION_FILES_DIR / str(session_id)


def delete_session(session: Session) -> None:
    """Delete the session, its messages (cascade) and its uploaded files folder."""
    folder = session_files_dir(session.id)
    session.delete()
    if folder.exists():
        shutil.rmtree(folder, ignore_errors=True)
