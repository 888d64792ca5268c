"""share_file and content_publish: hand files to the owner through the session's files.

share_file copies an allowed local file into the session's files folder and returns the
authenticated download link; content_publish marks a session file for inline display in the
chat (a `file_published` frame). `open_readable` is the race-free open image_view shares.
"""

from __future__ import annotations

import asyncio
import mimetypes
import os
import shutil
from pathlib import Path
from typing import Any, BinaryIO

from django.conf import settings
from django.db import IntegrityError
from django.urls import reverse

from sessions_app.models import SessionFile
from sessions_app.services import session_files_dir
from tools_app.base import Tool, ToolResult
from tools_app.context import current_chat_session_id, emit
from tools_app.events import FilePublished
from tools_app.safe_paths import PathRefused, open_for_reading
from tools_app.workspace import current_file_roots, workspace_for


async def open_readable(raw: str) -> tuple[BinaryIO, Path]:
    """(open file, real path) of an allowed regular file, opened without following a symlink
    swapped in after the check. Relative paths are taken from the workspace, then from the
    session's files folder."""

    if not isinstance(raw, str) or not raw or "\x00" in raw:
        raise PathRefused("invalid path (empty or containing NUL); give a file path inside the workspace")
    roots = await current_file_roots()
    bases = [str(workspace_for())]
    session_id = current_chat_session_id.get()
    if not os.path.isabs(os.path.expanduser(raw)) and session_id:
        bases.append(str(session_files_dir(session_id)))
    outside = False
    for base in bases:
        try:
            fd, real = await asyncio.to_thread(open_for_reading, raw, roots, base)
        except PathRefused as exc:
            if "outside the allowed paths" not in str(exc):
                raise  # a link or a device: say so, do not try the next folder
            outside = True
            continue
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            continue
        return os.fdopen(fd, "rb"), Path(real)
    if outside:
        raise PathRefused(
            f"'{raw}' is outside the allowed folders ({', '.join(r.path for r in roots)}); "
            "copy the file into the workspace first"
        )
    raise PathRefused(f"no such file: '{raw}'; check the path with filesystem(action='list')")


def file_url(session_id: str, name: str) -> str:
    """The authenticated download link of a session file."""
    return reverse("session-file", kwargs={"session_id": str(session_id), "name": name})


def _free_name(folder: Path, name: str, taken: set[str]) -> str:
    stem, suffix = Path(name).stem, Path(name).suffix
    candidate, n = name, 0
    while candidate in taken or (folder / candidate).exists():
        n += 1
        candidate = f"{stem}_{n}{suffix}"
    return candidate


class ShareFileTool(Tool):
    name = "share_file"
    keywords = "share give download link send attach"
    examples = (
        "give me a download link for the report",
        "send me the spreadsheet so I can download it",
        "share the zip file with me",
    )
    description = (
        "Give the owner a download link to an existing file, left as it is: copies a "
        "local file (workspace or other allowed folder) into this "
        "chat session's files and returns a download link to put in your answer. Use "
        "content_publish afterwards to show it inline in the chat."
    )
    parameters = {
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "file path (relative paths start in the workspace)"},
            "name": {"type": "string", "description": "optional file name for the download"},
        },
        "required": ["path"],
    }

    async def execute(self, params: dict[str, Any]) -> ToolResult:
        session_id = current_chat_session_id.get()
        if not session_id:
            return ToolResult(False, error="share_file only works inside a chat session")
        try:
            handle, source = await open_readable(params["path"])
        except PathRefused as exc:
            return ToolResult(False, error=str(exc))
        with handle:
            return await self._share(session_id, handle, source, params)

    async def _share(self, session_id: str, handle: BinaryIO, source: Path, params: dict[str, Any]) -> ToolResult:

        size = os.fstat(handle.fileno()).st_size
        limit = settings.SESSION_FILES_MAX_SIZE_MB * 1024 * 1024
        if size > limit:
            return ToolResult(False, error=f"the file is {size // (1024 * 1024)} MB, over the {settings.SESSION_FILES_MAX_SIZE_MB} MB limit for session files; compress or split it")
        folder = Path(session_files_dir(session_id))
        if source.parent == folder.resolve() and not params.get("name"):
            existing = await SessionFile.objects.filter(session_id=session_id, name=source.name).afirst()
            if existing is not None:  # already a session file (e.g. an upload): just link it
                url = file_url(session_id, existing.name)
                return ToolResult(True, f"'{existing.name}' is already a session file. Download link: {url}", metadata={"url": url, "name": existing.name})
        wanted = Path(params.get("name") or source.name).name.strip() or source.name
        if wanted.startswith("."):
            wanted = "file" + wanted
        name = await _copy_in(session_id, handle, wanted, size)
        if name is None:
            return ToolResult(False, error="could not find a free file name; retry with another `name`")
        url = file_url(session_id, name)
        return ToolResult(True, f"Shared '{name}' ({size} bytes). Download link: {url}", metadata={"url": url, "name": name})


def _copy_exclusive(source: BinaryIO, dest: Path) -> None:
    """Copy into a file this call creates (never overwrites a concurrent share's file)."""
    fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o640)
    with os.fdopen(fd, "wb") as out:
        source.seek(0)
        shutil.copyfileobj(source, out)


async def _copy_in(session_id: str, source: BinaryIO, wanted: str, size: int) -> str | None:
    """Copy `source` into the session's files under a free name and record it; the name used."""

    folder = Path(session_files_dir(session_id))
    folder.mkdir(parents=True, exist_ok=True)
    for _attempt in range(5):
        taken = {n async for n in SessionFile.objects.filter(session_id=session_id).values_list("name", flat=True)}
        name = _free_name(folder, wanted, taken)
        dest = folder / name
        try:
            await asyncio.to_thread(_copy_exclusive, source, dest)
        except FileExistsError:
            continue
        try:
            await SessionFile.objects.acreate(session_id=session_id, name=name, path=str(dest), size=size)
        except IntegrityError:  # a concurrent share took the name: pick another
            dest.unlink(missing_ok=True)
            continue
        return name
    return None


class ContentPublishTool(Tool):
    name = "content_publish"
    keywords = "show display inline publish preview"
    examples = (
        "show me the chart here in the chat",
        "display the PDF inline",
        "preview the picture you made",
    )
    description = (
        "Show one of this chat's files inline in the chat, as it is (images, PDFs, HTML, text). "
        "The file must already be a session file: upload or share_file it first."
    )
    parameters = {
        "type": "object",
        "properties": {"name": {"type": "string", "description": "session file name (as returned by share_file)"}},
        "required": ["name"],
    }

    async def execute(self, params: dict[str, Any]) -> ToolResult:

        session_id = current_chat_session_id.get()
        if not session_id:
            return ToolResult(False, error="content_publish only works inside a chat session")
        name = params["name"]
        row = await SessionFile.objects.filter(session_id=session_id, name=name).afirst()
        if row is None:
            names = [n async for n in SessionFile.objects.filter(session_id=session_id).values_list("name", flat=True)]
            listing = ", ".join(names) or "(none yet)"
            return ToolResult(False, error=f"no session file named '{name}'; session files: {listing}. Use share_file to add one")
        if not row.published:
            row.published = True
            await row.asave(update_fields=["published"])
        url = file_url(session_id, row.name)
        mime = mimetypes.guess_type(row.name)[0] or "application/octet-stream"
        emit(FilePublished(name=row.name, url=url, mime=mime))
        return ToolResult(True, f"Published '{row.name}' ({mime}) inline in the chat: {url}")
