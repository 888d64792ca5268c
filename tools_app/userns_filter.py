"""A seccomp filter that stops sandboxed programs from making user namespaces (`unshare -r`).

A new user namespace gives a program root-like powers over fresh namespaces and so a much wider
kernel surface (most kernel privilege escalations of recent years start there). bwrap's own
`--disable-userns` needs a user namespace of the sandbox, which a server running as root does
not make (see sandbox._namespaces), so the sandbox loads this filter in both modes: `unshare`
and `clone` with CLONE_NEWUSER fail with EPERM, `clone3` (whose flags a filter cannot read)
with ENOSYS so the C library falls back to `clone`, as Flatpak and Docker do. Written as
classic BPF by hand: libseccomp's Python binding is not on PyPI.
"""

from __future__ import annotations

import atexit
import errno
import os
import platform
import shutil
import struct
import tempfile

CLONE_NEWUSER = 0x10000000
# Per architecture: the kernel's audit arch, (unshare, clone, clone3), whether x32 numbers exist.
ARCHES = {
    "x86_64": (0xC000003E, (272, 56, 435), True),
    "aarch64": (0xC00000B7, (97, 220, 435), False),
}
_LD_ABS_W, _JEQ, _JGE, _JSET, _RET = 0x20, 0x15, 0x35, 0x45, 0x06
_ALLOW = 0x7FFF0000
_ERRNO = 0x00050000
_NR, _ARCH, _ARG0 = 0, 4, 16  # offsets in struct seccomp_data (little-endian: arg0's low half)

_path: str | None = None


def program(machine: str | None = None) -> bytes | None:
    """The filter for this machine as `struct sock_filter[]` bytes, or None for an unknown one."""
    arch = ARCHES.get(machine or platform.machine())
    if arch is None:
        return None
    audit_arch, (unshare, clone, clone3), x32 = arch
    deny, enosys = _ERRNO | errno.EPERM, _ERRNO | errno.ENOSYS
    code = [
        (_LD_ABS_W, 0, 0, _ARCH),
        (_JEQ, 1, 0, audit_arch),
        (_RET, 0, 0, deny),  # another ABI (i386 through int 0x80): its numbers differ, refuse it
        (_LD_ABS_W, 0, 0, _NR),
        (_JGE, 8, 0, 0x40000000) if x32 else (_JEQ, 0, 0, 0xFFFFFFFF),  # x32 numbers: refused
        (_JEQ, 8, 0, clone3),
        (_JEQ, 2, 0, unshare),
        (_JEQ, 1, 0, clone),
        (_RET, 0, 0, _ALLOW),
        (_LD_ABS_W, 0, 0, _ARG0),  # the flags of unshare and clone
        (_JSET, 1, 0, CLONE_NEWUSER),
        (_RET, 0, 0, _ALLOW),
        (_RET, 0, 0, deny),
        (_RET, 0, 0, deny),
        (_RET, 0, 0, enosys),
    ]
    return b"".join(struct.pack("<HBBI", *instruction) for instruction in code)


def filter_path() -> str | None:
    """A file holding the filter (written once per process, in a private folder), or None."""
    global _path
    if _path is None:
        data = program()
        if data is None:
            return None
        folder = tempfile.mkdtemp(prefix="navi-seccomp-")  # 0700, ours: nobody can swap the file
        path = os.path.join(folder, "no-userns.bpf")
        with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644), "wb") as out:
            out.write(data)
        atexit.register(shutil.rmtree, folder, True)
        _path = path
    return _path


def with_filter(bwrap_argv: list[str]) -> list[str]:
    """`bwrap_argv` started so that bwrap loads the filter from fd 3 (`--seccomp 3`), opened by a
    shell that then becomes bwrap: no caller has to pass a descriptor along."""
    path = filter_path()
    if path is None:
        return bwrap_argv
    return ["/bin/sh", "-c", 'exec "$@" 3<"$0"', path, bwrap_argv[0], "--seccomp", "3", *bwrap_argv[1:]]
