"""What a backup archive may hold, as one rule: `navi_backup` writes only what it allows and
`navi_restore` unpacks only what it allows, checking every member itself (type, name, link
target, size) instead of trusting `tarfile`'s extraction filters, which older Pythons lack or
get wrong. Allowed: plain files and folders under the names a backup uses; never links,
devices, fifos, absolute names or `..`."""

from __future__ import annotations

import os
import shutil
import stat
import tarfile
import time
from dataclasses import dataclass, field
from pathlib import Path

FOLDERS = ("session_files", "user_tools")
FILES = ("manifest.json", "database.sqlite3", "database.json", "ssh_hosts.json")
PART_FILES: set[str] = set()  # the parts apps register (backup.register_part), e.g. vectors.bin
_PLAIN_FILE = (tarfile.REGTYPE, tarfile.AREGTYPE)
_KINDS = {
    tarfile.SYMTYPE: "a symbolic link", tarfile.LNKTYPE: "a hard link", tarfile.CHRTYPE: "a character device",
    tarfile.BLKTYPE: "a block device", tarfile.FIFOTYPE: "a fifo", tarfile.CONTTYPE: "a contiguous file",
}


class UnsafeArchive(Exception):
    """An archive member restore must not unpack; the message names it."""


def name_problem(name: str) -> str | None:
    """Why `name` cannot be a member of a backup, or None."""
    if not name or "\x00" in name:
        return "has an empty name"
    if name.startswith("/"):
        return "has an absolute name"
    parts = name.rstrip("/").split("/")
    if any(part in ("", ".", "..") for part in parts):
        return "has an empty, `.` or `..` part in its name"
    files = (*FILES, *sorted(PART_FILES))
    if parts[0] not in FOLDERS + files or (parts[0] in files and len(parts) > 1):
        return "is not part of a Navi backup"
    return None


def member_problem(member: tarfile.TarInfo) -> str | None:
    """Why restore refuses this member, or None: only plain files and folders with safe names."""
    if member.issym() or member.islnk():
        return f"is {_KINDS[member.type]} (to {member.linkname!r}); a backup holds only files and folders"
    if member.type not in (*_PLAIN_FILE, tarfile.DIRTYPE):
        return f"is {_KINDS.get(member.type, f'of tar type {member.type!r}')}; a backup holds only files and folders"
    problem = name_problem(member.name)
    if problem:
        return problem
    parts = member.name.rstrip("/").split("/")
    if member.isdir() and parts[0] in (*FILES, *PART_FILES):
        return "is a folder where a file belongs"
    if not member.isdir() and parts == [parts[0]] and parts[0] in FOLDERS:
        return "is a file where a folder belongs"
    if member.size < 0 or (member.isdir() and member.size):
        return f"has an impossible size ({member.size})"
    return None


def check_members(members: list[tarfile.TarInfo], work: Path) -> None:
    """Refuse the archive, naming every bad member, before anything is unpacked."""
    problems = [f"{m.name!r} {p}" for m in members if (p := member_problem(m))]
    seen: set[str] = set()
    for member in members:
        name = member.name.rstrip("/")
        if name in seen:
            problems.append(f"{name!r} appears twice")
        seen.add(name)
    if problems:
        raise UnsafeArchive("; ".join(problems))
    total = sum(m.size for m in members)
    free = shutil.disk_usage(work).free
    if total > free:
        raise UnsafeArchive(
            f"it unpacks to {total // 2**20} MB but only {free // 2**20} MB are free in {work}; free some space "
            "(or point TMPDIR at a bigger disk)"
        )


def unpack(tar: tarfile.TarFile, work: Path) -> None:
    """Every member into `work` (a new, empty folder), after `check_members` passed for all of them.
    Files are created, never opened through an existing name: no link can redirect a write."""
    members = tar.getmembers()
    check_members(members, work)
    for member in members:
        try:
            _unpack_one(tar, member, work / member.name.rstrip("/"))
        except (OSError, tarfile.TarError, EOFError) as exc:
            raise UnsafeArchive(f"{member.name!r} could not be unpacked ({exc})") from exc


def _unpack_one(tar: tarfile.TarFile, member: tarfile.TarInfo, target: Path) -> None:
    mode = safe_mode(member.mode)
    if member.isdir():
        target.mkdir(mode=0o700, parents=True, exist_ok=True)
        target.chmod(mode | 0o700)
        return
    target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    source = tar.extractfile(member)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    with source, os.fdopen(os.open(target, flags, 0o600), "wb") as out:
        shutil.copyfileobj(source, out)
        os.fchmod(out.fileno(), mode)  # e.g. a tool file stays readable by the sandbox user
    if target.stat().st_size != member.size:
        raise UnsafeArchive(f"{member.name!r} is cut short: {target.stat().st_size} of {member.size} bytes")


# --- writing ------------------------------------------------------------------------------------
def safe_mode(mode: int) -> int:
    """Permission bits a backup keeps: no setuid, setgid or sticky bit, no write for others;
    always readable and writable by the owner."""
    return stat.S_IMODE(mode) & 0o755 | 0o600


def folder_info(name: str, mode: int = 0o700) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.mtime = tarfile.DIRTYPE, safe_mode(mode) | 0o700, int(time.time())
    return info


def add_file(tar: tarfile.TarFile, path: Path, name: str, *, follow: bool = False) -> None:
    """One plain file as a plain member, whatever else links to it (tarfile would store a second
    name of a hard-linked file as a link, which restore refuses)."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if isinstance(exc, FileNotFoundError):
            raise
        raise UnsafeArchive(f"it is no longer a plain file ({exc.strerror})") from exc
    with os.fdopen(fd, "rb") as source:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UnsafeArchive("it is no longer a plain file")
        info = tarfile.TarInfo(name)
        info.size, info.mtime, info.mode = st.st_size, int(st.st_mtime), safe_mode(st.st_mode)
        tar.addfile(info, source)


@dataclass
class FolderContents:
    """What of a folder goes into a backup, and what is left out (restore would refuse it)."""

    folders: list[Path] = field(default_factory=list)
    files: list[Path] = field(default_factory=list)
    skipped: list[tuple[Path, str]] = field(default_factory=list)


# Deeper folders are left out with a warning: restore copies and counts folders recursively, and
# a user tool's data folder 1 100 levels deep once made every backup die (RecursionError).
MAX_DEPTH = 100


def folder_contents(folder: Path) -> FolderContents:
    """Walk `folder` without following links, with a stack rather than recursion; links,
    devices, fifos, sockets, unreadable folders and folders nested deeper than MAX_DEPTH are
    skipped (listed in `skipped` with the reason)."""
    found = FolderContents()
    stack = [(folder, 0)]
    while stack:
        top, depth = stack.pop()
        try:
            with os.scandir(top) as entries:
                names = sorted(e.name for e in entries if e.name != "__pycache__")
        except OSError as exc:  # unreadable, or gone since it was listed
            if top != folder and not isinstance(exc, FileNotFoundError):
                found.skipped.append((top, f"cannot be read ({exc.strerror or exc})"))
            continue
        below = []
        for name in names:
            path = top / name
            try:
                mode = path.lstat().st_mode
            except FileNotFoundError:
                continue
            except OSError as exc:  # e.g. a name too long for the system to open
                found.skipped.append((path, f"cannot be read ({exc.strerror or exc})"))
                continue
            reason = leave_out_reason(path, mode)
            if reason is None and stat.S_ISDIR(mode) and depth + 1 > MAX_DEPTH:
                reason = f"a folder nested more than {MAX_DEPTH} levels deep (its contents too)"
            if reason:
                found.skipped.append((path, reason))
            elif stat.S_ISDIR(mode):
                found.folders.append(path)
                below.append(path)
            else:
                found.files.append(path)
        stack.extend((path, depth + 1) for path in reversed(below))
    return found


def leave_out_reason(path: Path, mode: int) -> str | None:
    """Why a folder entry stays out of a backup, or None for plain files and folders."""
    if stat.S_ISLNK(mode):
        return f"a symbolic link (to {os.readlink(path)!r})"
    if stat.S_ISDIR(mode) or stat.S_ISREG(mode):
        return None
    if stat.S_ISFIFO(mode):
        return "a fifo"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "a device"
