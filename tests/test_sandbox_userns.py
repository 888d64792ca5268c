"""No user namespaces inside the sandbox (issue #35 item 6): `unshare -r` worked there, and with
it a fresh set of namespaces where the program is root, a much wider kernel surface. Run this
file as root and as a plain user: the sandbox is built differently in each (setpriv vs bwrap's
own user namespace), and the refusal must hold in both."""

from __future__ import annotations

import json
import struct

import pytest

from tools_app import userns_filter
from tools_app.builtin.code_exec import CodeExecTool
from tools_app.builtin.terminal import TerminalTool


@pytest.fixture
def sandboxed(settings):
    settings.TOOL_TIMEOUT_S = 20
    settings.CODE_EXEC_SANDBOX = "bwrap"
    settings.CODE_EXEC_NETWORK = False
    settings.TERMINAL_ALLOWED_COMMANDS = "*"


def _output(result) -> str:
    return (result.output or "") + (result.error or "")


@pytest.mark.parametrize("command", ["unshare -r id", "unshare --user id", "unshare -r -n id", "unshare -U -r -m -p -f id"])
async def test_unshare_fails_in_a_terminal_command(sandboxed, command):
    result = await TerminalTool().execute({"command": f"{command}; echo exit=$?"})
    text = _output(result)
    assert "uid=0" not in text and "exit=1" in text, text
    assert "Operation not permitted" in text or "Function not implemented" in text, text


PROBE = r'''
import ctypes, json, os, threading, subprocess
libc = ctypes.CDLL(None, use_errno=True)
CLONE_NEWUSER, CLONE_NEWNS = 0x10000000, 0x20000
out = {}
for name, flags in (("unshare_user", CLONE_NEWUSER), ("unshare_user_and_mount", CLONE_NEWUSER | CLONE_NEWNS)):
    rc = libc.unshare(flags)
    out[name] = (rc, ctypes.get_errno())
# clone with CLONE_NEWUSER (through the raw syscall: no wrapper to help)
SYS_clone = {"x86_64": 56, "aarch64": 220}[os.uname().machine]
SIGCHLD = 17
rc = libc.syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, 0, 0, 0, 0)
if rc == 0:
    os._exit(0)
if rc > 0:
    os.waitpid(rc, 0)
out["clone_user"] = (rc, ctypes.get_errno())
# ordinary work still runs: threads (clone3 falls back to clone) and child processes
done = []
t = threading.Thread(target=lambda: done.append(1)); t.start(); t.join()
out["thread"] = done == [1]
out["child"] = subprocess.run(["echo", "child-ok"], capture_output=True, text=True).stdout.strip()
out["uid_map"] = open("/proc/self/uid_map").read().split()
print(json.dumps(out))
'''


async def test_code_exec_cannot_make_a_user_namespace_but_threads_and_children_work(sandboxed):
    result = await CodeExecTool().execute({"code": PROBE})
    assert result.success, _output(result)
    found = json.loads(result.output.split("\n[exit code")[0].strip().splitlines()[-1])
    for name in ("unshare_user", "unshare_user_and_mount", "clone_user"):
        rc, err = found[name]
        assert rc == -1 and err == 1, (name, found)  # EPERM
    assert found["thread"] is True and found["child"] == "child-ok", found


def test_the_filter_is_well_formed():
    for machine in userns_filter.ARCHES:
        data = userns_filter.program(machine)
        assert len(data) % 8 == 0
        code = [struct.unpack("<HBBI", data[i:i + 8]) for i in range(0, len(data), 8)]
        for index, (op, jt, jf, _) in enumerate(code):  # every jump lands inside the program
            if op & 0x07 == 0x05:
                assert index + 1 + max(jt, jf) < len(code)
        assert code[-1][0] == 0x06  # it ends with a return
    assert userns_filter.program("sparc") is None


def test_the_sandbox_a_plain_user_gets_refuses_unshare_too(monkeypatch):
    """The sandbox as built for a server that does not run as root (bwrap's own user namespace,
    --disable-userns and the filter), run by a plain user: `su nobody` when this suite runs as
    root, else the suite's own user."""
    import os
    import shlex
    import shutil
    import subprocess
    import tempfile

    from tools_app import sandbox

    root = os.geteuid() == 0
    folder = tempfile.mkdtemp(prefix="navi-userns-test-")
    try:
        workspace = os.path.join(folder, "ws")
        os.mkdir(workspace)
        bpf = os.path.join(folder, "filter.bpf")
        shutil.copy(userns_filter.filter_path(), bpf)
        if root:  # readable by nobody: the server's own files are its own in that mode
            os.chmod(folder, 0o755)
            os.chmod(bpf, 0o644)
            os.chown(workspace, 65534, 65534)
        with monkeypatch.context() as patch:
            patch.setattr(os, "geteuid", lambda: 65534)
            argv = sandbox.bwrap_argv(sandbox.bwrap_binary(), workspace)
        assert "--disable-userns" in argv and "--seccomp" in argv
        argv[argv.index(userns_filter.filter_path())] = bpf
        command = argv + ["/bin/sh", "-c", "id -u; unshare -r id; echo rc=$?"]
        if root:
            command = ["su", "nobody", "-s", "/bin/sh", "-c", " ".join(shlex.quote(a) for a in command)]
        done = subprocess.run(command, capture_output=True, text=True, timeout=60)
        text = done.stdout + done.stderr
        assert "rc=1" in text and "uid=0" not in text, text
        assert text.split()[0] != "0", text  # never root inside
    finally:
        shutil.rmtree(folder, ignore_errors=True)
