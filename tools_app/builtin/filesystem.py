"""filesystem: read, write, append, list, mkdir, delete, move, search — only inside FS_ALLOWED_PATHS.

Every path is resolved (symlinks and `..` included) before the allowlist check, so a symlink
or a relative path cannot lead outside. `*` in FS_ALLOWED_PATHS means unrestricted.
"""

from __future__ import annotations

import asyncio
import fnmatch
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from django.conf import settings

from tools_app.base import Tool, ToolResult

if TYPE_CHECKING:
    from agent.loop import Agent

ACTIONS = ("read", "write", "append", "list", "mkdir", "delete", "move", "search")
MAX_LIST = 500
MAX_MATCHES = 200


class PathRefused(ValueError):
    """A path outside the allowlist or otherwise unusable; the message says what is allowed."""


def read_cap() -> int:
    return int(getattr(settings, "FS_READ_MAX_BYTES", 200_000))


def allowed_roots() -> list[str] | None:
    """Resolved allowlist roots; None when unrestricted ('*')."""
    # Read from django.conf.settings (not navi_project.settings' helper) so overrides apply.
    entries = [p.strip() for p in str(settings.FS_ALLOWED_PATHS).split(",") if p.strip()]
    if "*" in entries:
        return None
    return [os.path.realpath(_absolute(e)) for e in entries]


def _absolute(raw: str | Path) -> str:
    path = Path(raw)
    return str(path if path.is_absolute() else Path(settings.NAVI_WORKSPACE) / path)


def resolve(raw: Any) -> Path:
    """The real path for `raw`, or PathRefused. Relative paths start at the workspace."""
    if not isinstance(raw, str) or not raw.strip():
        raise PathRefused("path must be a non-empty string")
    if "\x00" in raw:
        raise PathRefused("path contains a NUL byte")
    real = os.path.realpath(_absolute(raw))
    roots = allowed_roots()
    if roots is not None and not any(real == r or real.startswith(r.rstrip("/") + "/") for r in roots):
        raise PathRefused(
            f"'{raw}' resolves to {real}, outside the allowed paths ({', '.join(roots)}); "
            "use a path inside them (relative paths start in the workspace)"
        )
    return Path(real)


def _is_root(path: Path) -> bool:
    roots = allowed_roots() or []
    return str(path) in roots or str(path) == os.path.realpath(settings.NAVI_WORKSPACE)


class FilesystemTool(Tool):
    name = "filesystem"
    description = (
        "Work with files in the workspace (and the other allowed folders): read, write, append, "
        "list, mkdir, delete, move, search. Relative paths start in the workspace."
    )
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
        },
        "required": ["action", "path"],
    }

    async def execute(self, params: dict[str, Any]) -> ToolResult:
        try:
            return await asyncio.to_thread(self._dispatch, params)
        except PathRefused as exc:
            return ToolResult(False, error=f"refused: {exc}")
        except FileNotFoundError as exc:
            return ToolResult(False, error=f"not found: {exc.filename or params.get('path')}; list the folder to see what exists")
        except (IsADirectoryError, NotADirectoryError, FileExistsError, PermissionError, OSError) as exc:
            return ToolResult(False, error=f"{params['action']} failed: {exc}")

    def _dispatch(self, params: dict[str, Any]) -> ToolResult:
        action = params["action"]
        if action not in ACTIONS:
            return ToolResult(False, error=f"unknown action '{action}'; use one of {', '.join(ACTIONS)}")
        path = resolve(params["path"])
        handler = getattr(self, f"_{action}")
        return handler(path, params)

    def _read(self, path: Path, params: dict) -> ToolResult:
        size = path.stat().st_size
        offset = int(params.get("offset") or 0)
        cap = read_cap()
        with path.open("rb") as fh:
            fh.seek(offset)
            data = fh.read(cap)
        text = data.decode("utf-8", "replace")
        end = offset + len(data)
        if end < size:
            text += f"\n[truncated: showed bytes {offset}–{end} of {size}; read again with offset={end} for more]"
        return ToolResult(True, text)

    def _write(self, path: Path, params: dict, mode: str = "w") -> ToolResult:
        content = params.get("content")
        if content is None:
            return ToolResult(False, error=f"{params['action']} needs `content`")
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open(mode, encoding="utf-8") as fh:
            fh.write(content)
        verb = "Appended" if mode == "a" else "Wrote"
        return ToolResult(True, f"{verb} {len(content.encode())} bytes to {path}")

    def _append(self, path: Path, params: dict) -> ToolResult:
        return self._write(path, params, mode="a")

    def _list(self, path: Path, params: dict) -> ToolResult:
        entries = sorted(path.iterdir(), key=lambda p: p.name)
        lines = []
        for entry in entries[:MAX_LIST]:
            if entry.is_dir():
                lines.append(f"{entry.name}/")
            else:
                lines.append(f"{entry.name}  ({entry.lstat().st_size} bytes)")
        if len(entries) > MAX_LIST:
            lines.append(f"[truncated: {len(entries) - MAX_LIST} more entries; use search with a pattern]")
        return ToolResult(True, "\n".join(lines) or f"{path} is empty")

    def _mkdir(self, path: Path, params: dict) -> ToolResult:
        path.mkdir(parents=True, exist_ok=True)
        return ToolResult(True, f"Created {path}")

    def _delete(self, path: Path, params: dict) -> ToolResult:
        if _is_root(path):
            raise PathRefused(f"{path} is an allowed root folder itself and cannot be deleted")
        if path.is_dir():
            if params.get("recursive"):
                shutil.rmtree(path)
            else:
                try:
                    path.rmdir()
                except OSError:
                    return ToolResult(False, error=f"{path} is not empty; pass recursive=true to delete it with its contents")
        else:
            path.unlink()
        return ToolResult(True, f"Deleted {path}")

    def _move(self, path: Path, params: dict) -> ToolResult:
        if not params.get("destination"):
            return ToolResult(False, error="move needs `destination`")
        target = resolve(params["destination"])
        if _is_root(path):
            raise PathRefused(f"{path} is an allowed root folder itself and cannot be moved")
        if not path.exists():
            raise FileNotFoundError(2, "No such file", str(path))
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(path), str(target))
        return ToolResult(True, f"Moved {path} to {target}")

    def _search(self, path: Path, params: dict) -> ToolResult:
        pattern, text = params.get("pattern") or "*", params.get("text")
        matches: list[str] = []
        for folder, dirs, files in os.walk(path):  # does not follow symlinked folders
            dirs.sort()
            for name in sorted(files):
                if not fnmatch.fnmatch(name, pattern):
                    continue
                found = os.path.join(folder, name)
                try:
                    real = resolve(found)
                except PathRefused:
                    continue  # a symlink leaving the allowlist is never read
                if text and not _contains(real, text):
                    continue
                matches.append(found)
                if len(matches) >= MAX_MATCHES:
                    matches.append(f"[truncated at {MAX_MATCHES} matches; narrow the pattern or the folder]")
                    return ToolResult(True, "\n".join(matches))
        return ToolResult(True, "\n".join(matches) or "no matching files")


def _contains(path: Path, text: str) -> bool:
    try:
        with path.open("rb") as fh:
            return text.encode() in fh.read(5_000_000)
    except OSError:
        return False


def tools(agent: "Agent") -> list[Tool]:
    return [FilesystemTool()]
