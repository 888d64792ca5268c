"""filesystem: read, write, append, list, mkdir, delete, move, search — only inside the run's
allowed folders (tools_app.workspace.file_roots).

A user without `run_host_tools` works in their own workspace (and reads their session's
uploads); FS_ALLOWED_PATHS extras and `*` are for holders of that permission. TOOLS_DIR is never
changed, even with `*`. Paths are resolved and checked once, then opened from the root through
directory fds with O_NOFOLLOW (tools_app.safe_paths): a symlink swapped in after the check is
refused, not followed. A write over a file, a delete of one and a move onto one keep the old
content first (tools_app.file_versions): action=restore brings it back.
"""

from __future__ import annotations

import asyncio
import errno
import fnmatch
import os
import re
import shutil
import stat
from typing import Any

from django.conf import settings

from navi_project import fstree
from tools_app import file_versions
from tools_app.base import Tool, ToolResult
from tools_app.context import current_user_id
from tools_app.safe_paths import (
    PathRefused,
    check_writable,
    is_link_at,
    locate,
    open_dir,
    open_regular,
    parent_dir,
)
from tools_app.workspace import Root, current_file_roots, workspace_for

__all__ = ["FilesystemTool", "PathRefused"]

ACTIONS = ("read", "write", "append", "list", "mkdir", "delete", "move", "search", "restore")
CHANGES = {"write", "append", "mkdir", "delete", "move", "restore"}
MAX_LIST = 500
MAX_MATCHES = 200
SEARCH_READ_BYTES = 5_000_000


def read_cap() -> int:
    return int(getattr(settings, "FS_READ_MAX_BYTES", 200_000))


class _Target:
    """A checked path: its root and real path."""

    def __init__(self, root: Root, real: str, base: str = "") -> None:
        self.root, self.real = root, real
        # How results name it: relative inside the workspace (a small model copies an absolute
        # path's folders into its next path), absolute elsewhere.
        inside = bool(base) and os.path.commonpath([base, real]) == base
        self.shown = os.path.relpath(real, base) if inside else real

    @property
    def is_root(self) -> bool:
        return self.real == self.root.path


TABLES = (".csv", ".tsv")  # files of rows whose columns an appended row must keep (current_text)
TABLE_CHARS = 1500


def _ends_a_line(target: "_Target") -> bool:
    """The file is missing, empty, or its last character ends a line."""
    try:
        fd = open_regular(target.root, target.real, os.O_RDONLY)
    except (FileNotFoundError, OSError):
        return True
    try:
        size = os.fstat(fd).st_size
        return size == 0 or os.pread(fd, 1, size - 1) in (b"\n", b"\r")
    finally:
        os.close(fd)


class FilesystemTool(Tool):
    name = "filesystem"
    keywords = "file files folder directory path txt csv json md read open write save create make new append add line list contents rename move copy delete remove mkdir search find mention workspace text edit change replace"
    examples = (
        "read notes.txt and tell me what it says",
        "create a file called shopping.txt with eggs and milk",
        "add a line to the end of my diary file",
        "rename report_old.md to report.md",
        "what files are in the documents folder?",
        "delete the temp folder",
        "save this text to a file",
    )
    description = (
        "Read, write, append to, list, search, move (rename) or delete files and folders in the "
        "workspace (and the other allowed folders). Relative paths start in the workspace. Writing over "
        "a file, deleting or moving onto one keeps its old content: action=restore brings it back."
    )
    text_argument, text_actions = "content", ("write", "append")
    text_in_file = True
    actions = {"read": "path offset?", "write": "path content", "append": "path content", "list": "path",
               "mkdir": "path", "delete": "path recursive?", "move": "path destination", "search": "path pattern? text?",
               "restore": "path version?"}
    parameters = {
        "type": "object",
        "properties": {
            "action": {"type": "string", "enum": list(ACTIONS)},
            "path": {"type": "string", "description": "file or folder; relative = inside the workspace"},
            "content": {"type": "string", "description": "text for write/append"},
            "destination": {"type": "string", "description": "target path for move"},
            "pattern": {"type": "string", "description": "search: file-name glob, e.g. '*.py' (default '*')"},
            "text": {"type": "string", "description": "search: only files containing this text"},
            "offset": {"type": "integer", "minimum": 0, "description": "read: start at this byte"},
            "recursive": {"type": "boolean", "description": "delete: also non-empty folders"},
            "version": {"type": "string", "description": "restore: a kept version's id (default: the newest)"},
        },
        "required": ["action", "path"],
    }

    # A small model's step is offered these actions only where the request says so: they take
    # the owner's file away from where it was (the words are what the actions mean).
    _ASKED_BY = {
        "delete": re.compile(r"\b(delet|remov|eras|rm\b|clean|get rid|trash|discard|wipe)", re.I),
        "move": re.compile(r"\b(mov|renam|mv\b|relocat)", re.I),
    }

    def unasked_actions(self, request: str) -> frozenset[str]:
        return frozenset(a for a, words in self._ASKED_BY.items() if not words.search(request or ""))

    async def read_first(self, params: dict[str, Any], touched: set[str], request: str | None = None) -> dict[str, Any] | None:
        """For a small model's step: the arguments of a read of the file a `write` would replace,
        when that file exists and this turn has not touched it (`touched`: the paths its calls
        named). Told "add a row to expenses.csv", a 0.5B model wrote the one row over the file;
        with the file read first, what it writes next is written from its content. So is a
        `move` to a name `request` never says ("The party in invite.txt moved: change 12 May to
        19 May" moved invite.txt to invite.txt.19May). None: the call goes as it is."""
        path = params.get("path")
        if not isinstance(path, str) or path.strip().strip("/").lower() in touched:
            return None
        destination = params.get("destination")
        moved_unasked = (params.get("action") == "move" and request is not None and isinstance(destination, str)
                         and (os.path.basename(destination.strip().rstrip("/")).lower() not in request.lower()
                              or destination.strip().strip("/").lower() == path.strip().strip("/").lower()))
        if params.get("action") != "write" and not moved_unasked:
            return None
        try:
            _, real = locate(path, await current_file_roots(), str(workspace_for()))
        except PathRefused:
            return None
        return {"action": "read", "path": path} if await asyncio.to_thread(os.path.isfile, real) else None

    async def current_text(self, params: dict[str, Any]) -> str | None:
        """For a small model's step: the text of the table (.csv, .tsv) an `append` adds a row to,
        so the row is written in its columns ("lunch, 12.50" was appended to a file of
        "date,what,amount" rows). None for another action, another kind of file, or no file."""
        path = params.get("path")
        if params.get("action") != "append" or not isinstance(path, str) or not path.lower().endswith(TABLES):
            return None
        try:
            _, real = locate(path, await current_file_roots(), str(workspace_for()))
        except PathRefused:
            return None

        def head() -> str | None:
            if not os.path.isfile(real):
                return None
            with open(real, encoding="utf-8", errors="replace") as handle:
                return handle.read(TABLE_CHARS)

        return await asyncio.to_thread(head)

    async def execute(self, params: dict[str, Any]) -> ToolResult:
        roots: list[Root] = []
        try:
            roots = await current_file_roots()
            return await asyncio.to_thread(self._dispatch, params, roots, str(workspace_for()))
        except PathRefused as exc:
            return ToolResult(False, error=f"refused: {exc}")
        except FileNotFoundError as exc:
            return ToolResult(False, error=await asyncio.to_thread(_not_found, exc, params, roots, str(workspace_for())))
        except file_versions.NoVersion as exc:
            return ToolResult(False, error=str(exc))
        except (IsADirectoryError, NotADirectoryError, FileExistsError, PermissionError, OSError) as exc:
            return ToolResult(False, error=f"{params['action']} failed: {exc}")

    def _dispatch(self, params: dict[str, Any], roots: list[Root], base: str) -> ToolResult:
        action = params["action"]
        if action not in ACTIONS:
            return ToolResult(False, error=f"unknown action '{action}'; use one of {', '.join(ACTIONS)}")
        target = _Target(*locate(params["path"], roots, base), base)
        if action in CHANGES:
            check_writable(target.root, target.real)
        if action == "move":
            if not params.get("destination"):
                return ToolResult(False, error="move needs `destination`")
            destination = _Target(*locate(params["destination"], roots, base))
            check_writable(destination.root, destination.real)
            return self._move(target, destination)
        return getattr(self, f"_{action}")(target, params)

    def _read(self, target: _Target, params: dict) -> ToolResult:
        fd = open_regular(target.root, target.real)
        with os.fdopen(fd, "rb") as fh:
            size = os.fstat(fd).st_size
            offset = int(params.get("offset") or 0)
            fh.seek(offset)
            data = fh.read(read_cap())
        text = data.decode("utf-8", "replace")
        end = offset + len(data)
        if end < size:
            text += f"\n[truncated: showed bytes {offset}–{end} of {size}; read again with offset={end} for more]"
        return ToolResult(True, text)

    def _write(self, target: _Target, params: dict, append: bool = False) -> ToolResult:
        content = params.get("content")
        if content is None:
            return ToolResult(False, error=f"{params['action']} needs `content`")
        kept = file_versions.Kept() if append else _keep(target, "write")
        if append and target.real.lower().endswith(TABLES) and content and not content.startswith(("\n", "\r")) \
                and not _ends_a_line(target):
            content = "\n" + content  # a row of its own, not glued to the last one
        flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if append else os.O_TRUNC)
        fd = open_regular(target.root, target.real, flags, create_parents=True)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(content)
        verb = "Appended" if append else "Wrote"
        return ToolResult(True, f"{verb} {len(content.encode())} bytes to {target.shown}{kept.note(target.shown)}")

    def _append(self, target: _Target, params: dict) -> ToolResult:
        return self._write(target, params, append=True)

    def _list(self, target: _Target, params: dict) -> ToolResult:
        fd = open_dir(target.root, target.real)
        try:
            entries = sorted(os.scandir(fd), key=lambda e: e.name)
            lines = [_describe(entry) for entry in entries[:MAX_LIST]]
        finally:
            os.close(fd)
        if len(entries) > MAX_LIST:
            lines.append(f"[truncated: {len(entries) - MAX_LIST} more entries; use search with a pattern]")
        return ToolResult(True, "\n".join(lines) or f"{target.shown} is empty")

    def _mkdir(self, target: _Target, params: dict) -> ToolResult:
        with parent_dir(target.root, target.real, create=True) as (dir_fd, name):
            if name:
                try:
                    os.mkdir(name, 0o755, dir_fd=dir_fd)
                except FileExistsError:
                    if not stat.S_ISDIR(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode):
                        raise
        return ToolResult(True, f"Created {target.shown}")

    def _delete(self, target: _Target, params: dict) -> ToolResult:
        if target.is_root:
            raise PathRefused(f"{target.real} is an allowed root folder itself and cannot be deleted")
        kept, note = file_versions.Kept(), ""
        with parent_dir(target.root, target.real) as (dir_fd, name):
            mode = _lstat_at(dir_fd, name, target.real).st_mode
            if stat.S_ISREG(mode):
                kept = _keep(target, "delete")
            if not stat.S_ISDIR(mode):
                os.unlink(name, dir_fd=dir_fd)  # a symlink itself goes, never its target
            elif params.get("recursive"):
                fstree.rmtree(name, dir_fd=dir_fd)  # fd-based, a loop: never follows links, any depth
                note = " (a folder's contents are not kept: it cannot be restored)"
            else:
                try:
                    os.rmdir(name, dir_fd=dir_fd)
                except OSError:
                    return ToolResult(False, error=f"{target.shown} is not empty; pass recursive=true to delete it with its contents")
        return ToolResult(True, f"Deleted {target.shown}{note}{kept.note(target.shown)}")

    def _restore(self, target: _Target, params: dict) -> ToolResult:
        user_id = current_user_id.get()
        version = str(params.get("version") or "")
        if version and version not in {v["id"] for v in file_versions.versions(user_id, target.real)}:
            return ToolResult(False, error=f"no kept version {version!r} of {target.shown}; omit `version` for the newest")
        version = version or file_versions.latest_for(user_id, target.real)
        roots = [target.root]  # the path was checked against the run's roots already
        return ToolResult(True, file_versions.restore(version, user_id, roots, target.root.path))

    def _move(self, source: _Target, destination: _Target) -> ToolResult:
        if source.is_root:
            raise PathRefused(f"{source.real} is an allowed root folder itself and cannot be moved")
        with parent_dir(source.root, source.real) as (src_fd, src_name):
            if stat.S_ISLNK(_lstat_at(src_fd, src_name, source.real).st_mode):
                raise PathRefused(f"{source.real} is a symbolic link; links are not moved")
            kept = _keep(destination, "move")  # a file moved onto another replaces it
            with parent_dir(destination.root, destination.real, create=True) as (dst_fd, dst_name):
                final = _move_into(src_fd, src_name, dst_fd, dst_name, source.real, destination.real)
        return ToolResult(True, f"Moved {source.real} to {final}{kept.note(destination.shown)}")

    def _search(self, target: _Target, params: dict) -> ToolResult:
        pattern, text = params.get("pattern") or "*", params.get("text")
        matches: list[str] = []
        top = open_dir(target.root, target.real)
        try:
            for folder, dirs, files, folder_fd in fstree.fwalk(".", dir_fd=top):
                dirs.sort()
                for name in sorted(files):
                    if not fnmatch.fnmatch(name, pattern) or is_link_at(folder_fd, name):
                        continue
                    if text and not _contains(folder_fd, name, text):
                        continue
                    matches.append(os.path.normpath(os.path.join(target.real, folder, name)))
                    if len(matches) >= MAX_MATCHES:
                        matches.append(f"[truncated at {MAX_MATCHES} matches; narrow the pattern or the folder]")
                        return ToolResult(True, "\n".join(matches))
        finally:
            os.close(top)
        return ToolResult(True, "\n".join(matches) or "no matching files")


NEAR_SHOWN = 30  # entries of the folder named in a "not found" error


def _not_found(exc: FileNotFoundError, params: dict, roots: list[Root], base: str) -> str:
    """A missing path's error, with what its folder does hold (checked like any path: nothing
    outside the allowed folders is listed) and how to find a file by its text: a model that
    guessed "docs/kiwi.txt" for "which file in docs mentions kiwi?" then sees the real names
    and the search action instead of guessing again."""
    path = str(params.get("path") or "")
    message = f"not found: {path or exc.filename}"
    folder = os.path.dirname(path.rstrip("/")) or "."
    try:
        target = _Target(*locate(folder, roots, base), base)
        fd = open_dir(target.root, target.real)
        try:
            names = sorted((e.name + "/" if e.is_dir(follow_symlinks=False) else e.name) for e in os.scandir(fd))
        finally:
            os.close(fd)
    except (PathRefused, OSError, ValueError):
        return f"{message}; list the folder to see what exists"
    where = "the workspace" if folder == "." else f"{target.shown}/"
    if not names:
        return f"{message}; {where} is empty"
    shown = ", ".join(names[:NEAR_SHOWN]) + (f" and {len(names) - NEAR_SHOWN} more" if len(names) > NEAR_SHOWN else "")
    hint = (f'. To find the file that contains a text: action "search", path "{folder}", text "<the text>"'
            if params.get("action") in ("read", "list") else "")
    return f"{message}. {where} holds: {shown}{hint}"


def _keep(target: _Target, action: str) -> file_versions.Kept:
    """Keep the file at the target before `action` changes it (nothing when it is no file)."""
    return file_versions.keep(target.root, target.real, target.shown, action, current_user_id.get())


def _describe(entry: os.DirEntry) -> str:
    if entry.is_symlink():
        return f"{entry.name}@  (symbolic link, not followed)"
    if entry.is_dir(follow_symlinks=False):
        return f"{entry.name}/"
    return f"{entry.name}  ({entry.stat(follow_symlinks=False).st_size} bytes)"


def _lstat_at(dir_fd: int, name: str, full: str) -> os.stat_result:
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        raise FileNotFoundError(errno.ENOENT, "No such file or directory", full) from None


def _move_into(src_fd: int, src_name: str, dst_fd: int, dst_name: str, src_real: str, dst_real: str) -> str:
    """rename(2) between the two folder fds; into the destination when it is a folder."""
    try:
        if stat.S_ISDIR(os.stat(dst_name, dir_fd=dst_fd, follow_symlinks=False).st_mode):
            inner = os.open(dst_name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dst_fd)
            try:
                return _move_into(src_fd, src_name, inner, src_name, src_real, os.path.join(dst_real, src_name))
            finally:
                os.close(inner)
    except FileNotFoundError:
        pass
    _lstat_at(src_fd, src_name, src_real)
    try:
        os.rename(src_name, dst_name, src_dir_fd=src_fd, dst_dir_fd=dst_fd)
    except OSError as exc:
        if exc.errno != errno.EXDEV:
            raise
        _copy_across(src_fd, src_name, dst_fd, dst_name, src_real)
    return dst_real


def _copy_across(src_fd: int, src_name: str, dst_fd: int, dst_name: str, src_real: str) -> None:
    """A move to another file system: copy a regular file through fds, then remove the source."""
    if not stat.S_ISREG(os.stat(src_name, dir_fd=src_fd, follow_symlinks=False).st_mode):
        raise PathRefused(f"{src_real} is a folder on another file system; move its files one by one")
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
    with os.fdopen(os.open(src_name, flags, dir_fd=src_fd), "rb") as src:
        out_flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
        with os.fdopen(os.open(dst_name, out_flags, 0o644, dir_fd=dst_fd), "wb") as out:
            shutil.copyfileobj(src, out)
    os.unlink(src_name, dir_fd=src_fd)


def _contains(folder_fd: int, name: str, text: str) -> bool:
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=folder_fd)
    except OSError:
        return False
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return False
        return text.encode() in fh.read(SEARCH_READ_BYTES)
