"""Walking and removing folder trees without recursion and without following symlinks.

Python 3.11's `os.fwalk`, `shutil.rmtree` and `Path.rglob` recurse once per folder level: a tree
nested ~1 000 deep (a user tool or a sandboxed program can make one in its own folder) raises
RecursionError in every later walk of it. These loops keep their own stack, hold one open folder
per level (never a whole level's worth), and never follow a symlink."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _listing(fd: int) -> tuple[list[str], list[str]]:
    """(folders, other names) of the open folder `fd`; a symlink to a folder is an other name."""
    dirs: list[str] = []
    others: list[str] = []
    with os.scandir(fd) as entries:
        for entry in entries:
            try:
                is_dir = entry.is_dir(follow_symlinks=False)
            except OSError:
                is_dir = False
            (dirs if is_dir else others).append(entry.name)
    return dirs, others


def fwalk(top: str | Path = ".", *, dir_fd: int | None = None) -> Iterator[tuple[str, list[str], list[str], int]]:
    """`os.fwalk(top, dir_fd=dir_fd, follow_symlinks=False)`, top-down, as a loop: yields
    (path, dirnames, filenames, folder fd); removing names from dirnames skips those folders.
    A folder that cannot be opened (removed meanwhile, no permission) is skipped."""
    top = str(top)
    fd = os.open(top, _DIR_FLAGS, dir_fd=dir_fd)
    stack: list[tuple[str, int, Iterator[str]]] = [(top, fd, iter(()))]  # every fd open, closed once
    try:
        dirs, files = _listing(fd)
        yield top, dirs, files, fd
        stack[-1] = (top, fd, iter(list(dirs)))
        while stack:
            path, parent, names = stack[-1]
            name = next(names, None)
            if name is None:
                stack.pop()
                os.close(parent)
                continue
            try:
                child = os.open(name, _DIR_FLAGS, dir_fd=parent)
            except OSError:
                continue
            stack.append((os.path.join(path, name), child, iter(())))
            try:
                dirs, files = _listing(child)
            except OSError:
                continue
            yield stack[-1][0], dirs, files, child
            stack[-1] = (stack[-1][0], child, iter(list(dirs)))
    finally:
        for _, open_fd, _ in stack:
            os.close(open_fd)


def rmtree(path: str | Path, *, dir_fd: int | None = None, ignore_errors: bool = False) -> None:
    """`shutil.rmtree(path, dir_fd=dir_fd)` as a loop: the folder and everything in it, symlinks
    removed as links (never followed). A symlink or a file at `path` itself is removed as it is."""
    path = str(path)
    parent_path, name = os.path.split(os.path.normpath(path)) if dir_fd is None else (None, path)
    try:
        parent = os.open(parent_path or ".", _DIR_FLAGS & ~os.O_NOFOLLOW) if dir_fd is None else os.dup(dir_fd)
    except OSError:
        if ignore_errors:
            return
        raise
    try:
        _remove(parent, name)
    except OSError:
        if not ignore_errors:
            raise
    finally:
        os.close(parent)


def _remove(parent: int, name: str) -> None:
    try:
        mode = os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(mode):
        os.unlink(name, dir_fd=parent)
        return
    stack: list[tuple[int, str, int, Iterator[os.DirEntry]]] = []
    fd = os.open(name, _DIR_FLAGS, dir_fd=parent)
    stack.append((parent, name, fd, os.scandir(fd)))
    try:
        while stack:
            up, here, fd, entries = stack[-1]
            entry = next(entries, None)
            if entry is None:
                entries.close()
                os.close(fd)
                stack.pop()
                os.rmdir(here, dir_fd=up)
                continue
            try:
                is_dir = entry.is_dir(follow_symlinks=False)
            except OSError:
                is_dir = False
            if is_dir:
                child = os.open(entry.name, _DIR_FLAGS, dir_fd=fd)
                stack.append((fd, entry.name, child, os.scandir(child)))
            else:
                try:
                    os.unlink(entry.name, dir_fd=fd)
                except FileNotFoundError:
                    pass
    finally:
        for _, _, open_fd, entries in stack:
            entries.close()
            os.close(open_fd)


def files_under(folder: str | Path) -> Iterator[Path]:
    """Every non-folder entry under `folder` (symlinks as themselves), as `Path.rglob("*")`
    would list them, without recursion."""
    folder = Path(folder)
    for path, _, files, _ in fwalk(folder):
        for name in files:
            yield Path(path) / name


def entries_under(folder: str | Path) -> Iterator[Path]:
    """Every entry under `folder`, folders included (`Path.rglob("*")`)."""
    folder = Path(folder)
    for path, dirs, files, _ in fwalk(folder):
        for name in (*dirs, *files):
            yield Path(path) / name
