"""Files that arrive through a messenger become session files, with the upload's own checks
(sessions_app.files: the size cap, a sanitised name, no executables)."""

from __future__ import annotations

import os
from pathlib import Path

from sessions_app.files import is_executable, max_upload_bytes, sanitize_filename
from sessions_app.models import SessionFile
from sessions_app.services import session_files_dir


class FileRefused(Exception):
    """The file cannot be kept; the message says why and what to do."""


def save_session_file(session_id: str, raw_name: str, data: bytes) -> SessionFile:
    name = sanitize_filename(raw_name)
    if len(data) > max_upload_bytes():
        raise FileRefused(f"{name} is larger than the upload limit ({max_upload_bytes() // (1024 * 1024)} MB).")
    if is_executable(name, data[:8]):
        raise FileRefused(f"{name} looks like an executable or script; executables cannot be uploaded.")
    folder = Path(session_files_dir(session_id))
    folder.mkdir(parents=True, exist_ok=True)
    taken = set(SessionFile.objects.filter(session_id=session_id).values_list("name", flat=True))
    stem, ext = os.path.splitext(name)
    for n in range(10_000):
        candidate = name if n == 0 else f"{stem}_{n}{ext}"
        if candidate in taken:
            continue
        dest = folder / candidate
        try:  # O_EXCL | O_NOFOLLOW: never over an existing file or through a planted link
            fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o640)
        except FileExistsError:
            continue
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        return SessionFile.objects.create(session_id=session_id, name=candidate, path=str(dest), size=len(data))
    raise FileRefused("too many files with this name in the chat; rename the file")
