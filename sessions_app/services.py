"""Session lifecycle work shared by views, admin and commands."""

from __future__ import annotations

import logging

from django.conf import settings

from navi_project import fstree

from .models import Session

log = logging.getLogger(__name__)

def session_files_dir(session_id) -> "object":
    return settings.SESSION_FILES_DIR / str(session_id)


def delete_session(session: Session) -> None:
    """Delete the session, its messages (cascade) and its uploaded files folder."""
    folder = session_files_dir(session.id)
    session.delete()
    if folder.exists():
        fstree.rmtree(folder, ignore_errors=True)
