"""Opening user-given paths without symlink races.

A check on a path name followed by `open(name)` can be beaten by swapping a component for a
symlink in between (the attacker's code_exec did exactly that). Here a path is resolved and
checked once, then opened component by component from its allowed root with directory file
descriptors and O_NOFOLLOW: if anything on the way became a symlink since the check, the open
fails (ELOOP) instead of following it. Symlinks that stay inside the root are resolved by the
check, so they keep working; symlinks that leave it are refused.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager

from .workspace import Root, tools_dir_real

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_ROOT_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC


class PathRefused(ValueError):
    """A path outside the allowed folders or otherwise unusable; the message says what is allowed."""


def check_raw(raw: object) -> str:
    if not isinstance(raw, str) or not raw.strip():
        raise PathRefused("path must be a non-empty string")
    if "\x00" in raw:
        raise PathRefused("path contains a NUL byte")
    return raw


def locate(raw: str, roots: list[Root], base: str) -> tuple[Root, str]:
    """(root, real path) of a user-given path; relative paths start at `base`."""
    raw = check_raw(raw)
    path = os.path.expanduser(raw)
    real = os.path.realpath(path if os.path.isabs(path) else os.path.join(base, path))
    inside = [root for root in roots if root.contains(real)]
    if not inside:
        shown = ", ".join(r.path for r in roots)
        raise PathRefused(
            f"'{raw}' resolves to {real}, outside the allowed paths ({shown}); "
            f"use a path inside them (relative paths start in the workspace){_meant(path, roots, base)}"
        )
    return max(inside, key=lambda r: len(r.path)), real


def _meant(path: str, roots: list[Root], base: str) -> str:
    """For an absolute path whose folder exists in the workspace ("/docs/kiwi.txt" with a docs
    folder there: a model writing a workspace path with a leading slash), the relative path it
    meant; "" otherwise."""
    if not os.path.isabs(path) or not base:
        return ""
    relative = path.lstrip("/")
    candidate = os.path.realpath(os.path.join(base, relative))
    if not relative or not any(root.contains(candidate) for root in roots) or not os.path.isdir(os.path.dirname(candidate)):
        return ""
    return f"; did you mean '{relative}' (without the leading /)?"


def check_writable(root: Root, real: str) -> None:
    """Changes only in writable roots, and never in TOOLS_DIR: tool code comes only through
    write_tool, which checks it first."""
    tools = tools_dir_real()
    if real == tools or real.startswith(tools.rstrip("/") + "/") or tools.startswith(real.rstrip("/") + "/"):
        raise PathRefused(
            f"{real} is in the user tools folder, which the filesystem tool never changes; "
            "create or change tools with write_tool"
        )
    if not root.writable:
        raise PathRefused(f"{real} is in {root.path}, which is read-only (uploaded files); copy it into the workspace to change it")


def _refused_link(full: str) -> PathRefused:
    return PathRefused(f"{full} is (or became) a symbolic link leading elsewhere; links are not followed")


def _not_found(full: str) -> FileNotFoundError:
    return FileNotFoundError(errno.ENOENT, "No such file or directory", full)


def _open_at(dir_fd: int, name: str, flags: int, full: str, mode: int = 0o644) -> int:
    """os.open relative to dir_fd, never following a final symlink."""
    try:
        return os.open(name, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=dir_fd)
    except FileNotFoundError:
        raise _not_found(full) from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise _refused_link(full) from None
        if exc.errno == errno.ENOTDIR and is_link_at(dir_fd, name):
            raise _refused_link(full) from None
        raise type(exc)(exc.errno, exc.strerror, full) from None


def is_link_at(dir_fd: int, name: str) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def _components(root: str, real: str) -> list[str]:
    rel = os.path.relpath(real, root)
    return [] if rel == "." else rel.split(os.sep)


@contextmanager
def parent_dir(root: Root, real: str, *, create: bool = False) -> Iterator[tuple[int, str]]:
    """(fd of the folder holding `real`, final name) reached from the root without following
    any link; the name is '' for the root itself. `create` makes missing folders on the way."""
    parts = _components(root.path, real)
    fd = os.open(root.path, _ROOT_FLAGS)  # the root is the owner's configuration: trusted
    try:
        walked = root.path
        for name in parts[:-1]:
            walked = os.path.join(walked, name)
            if create:
                try:
                    os.mkdir(name, 0o755, dir_fd=fd)
                except FileExistsError:
                    pass
            child = _open_at(fd, name, _DIR_FLAGS, walked)
            os.close(fd)
            fd = child
        yield fd, parts[-1] if parts else ""
    finally:
        os.close(fd)


def open_dir(root: Root, real: str) -> int:
    """A directory fd for `real`."""
    with parent_dir(root, real) as (dir_fd, name):
        if not name:
            return os.dup(dir_fd)
        return _open_at(dir_fd, name, _DIR_FLAGS, real)


def open_regular(root: Root, real: str, flags: int = os.O_RDONLY, *, create_parents: bool = False) -> int:
    """An fd of the regular file `real` (O_NONBLOCK so a FIFO cannot hang the call)."""
    with parent_dir(root, real, create=create_parents) as (dir_fd, name):
        if not name:
            raise IsADirectoryError(errno.EISDIR, "Is a directory", real)
        fd = _open_at(dir_fd, name, flags | os.O_NONBLOCK, real)
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(errno.EISDIR, "Is a directory", real)
        raise PathRefused(f"{real} is not a regular file (a device, socket or pipe)")
    return fd


def open_for_reading(raw: str, roots: list[Root], base: str) -> tuple[int, str]:
    """(fd, real path) of an allowed regular file, opened race-free."""
    root, real = locate(raw, roots, base)
    return open_regular(root, real), real
