"""One way to run a child process for a tool: own process group, wall-clock timeout, capped
output, and the whole group killed on timeout, on overflow and when the tool task is cancelled
(Stop). code_exec, terminal and user tools all go through `run_process`, and all three run
inside the same bubblewrap sandbox built by `bwrap_argv`.

`Limits` adds resource limits: address space, file size and no core dumps through `prlimit`
(util-linux), and a process cap from a throwaway `pids` cgroup where one is writable (running
as root; RLIMIT_NPROC would count every process of the server's user, so it is not used)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import signal
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from django.conf import settings

log = logging.getLogger(__name__)

# Environment variables a child may inherit; everything else (API keys, SECRET_KEY,
# DATABASE_URL...) stays in the server process.
_SAFE_ENV = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TERM")


def safe_env(home: str | Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    """A minimal environment for children: no secrets of the server leak into tools."""
    env = {k: os.environ[k] for k in _SAFE_ENV if k in os.environ}
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    env["HOME"] = str(home)
    env["PYTHONIOENCODING"] = "utf-8"
    env.update(extra or {})
    return env


# --- the bubblewrap sandbox ------------------------------------------------------------------
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32")
ETC_FILES = (
    "/etc/alternatives", "/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/localtime",
    "/etc/ssl", "/etc/ca-certificates", "/etc/nsswitch.conf", "/etc/hosts", "/etc/resolv.conf",
    "/etc/mime.types", "/etc/python3", "/etc/python3.11", "/etc/magic", "/etc/passwd", "/etc/group",
)
SANDBOX_PATH = "/usr/local/bin:/usr/bin:/bin"


def missing_bwrap(tool: str) -> str:
    """The refusal when bubblewrap is not installed, with both ways out."""
    return (
        f"{tool} needs bubblewrap (bwrap), which is not installed. Install it with "
        "`sudo apt-get install bubblewrap`, or set CODE_EXEC_SANDBOX=none in .env to run code_exec, "
        "terminal and user tools without a sandbox (unsafe: they can then read and change everything "
        "the server can, its database and secret key included)."
    )


def sandbox_disabled() -> bool:
    """CODE_EXEC_SANDBOX=none: the owner's explicit, unsafe opt-out for every sandboxed tool."""
    return str(getattr(settings, "CODE_EXEC_SANDBOX", "bwrap")).lower() == "none"


def bwrap_binary() -> str | None:
    return shutil.which("bwrap") or ("/usr/bin/bwrap" if os.path.exists("/usr/bin/bwrap") else None)


def sandbox_env(home: str | Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The whole environment inside the sandbox (and of bwrap itself, whose /proc/1/environ the
    sandbox can read): PATH, HOME, LANG and what the tool adds, nothing of the server."""
    env = {"PATH": SANDBOX_PATH, "HOME": str(home), "LANG": os.environ.get("LANG") or "C.UTF-8"}
    env.update(extra or {})
    return env


def python_dirs(python: str) -> list[str]:
    """Folders an interpreter outside /usr (pyenv) needs, to be bound read-only: its prefix."""
    if os.path.realpath(python).startswith("/usr/"):
        return []
    return [os.path.realpath(sys.base_prefix)]


def bwrap_argv(
    bwrap: str,
    workspace: str | Path,
    *,
    network: bool = False,
    throwaway_workspace: bool = False,
    python: str | None = None,
    binds: Sequence[tuple[str, str]] = (),
    ro_binds: Sequence[tuple[str, str]] = (),
    tmpfs: Sequence[str] = (),
    env: dict[str, str] | None = None,
) -> list[str]:
    """The bwrap prefix of a sandboxed command: new namespaces (pid, net, ipc...), a fresh /proc,
    read-only system folders, a private /tmp, the workspace as the only writable folder (a
    tmpfs that vanishes when `throwaway_workspace`), an empty environment."""
    workspace = str(workspace)
    argv = [bwrap, "--die-with-parent", "--new-session", "--unshare-all"]
    if network:
        argv.append("--share-net")
    if os.geteuid() == 0:
        argv += ["--cap-drop", "ALL"]  # root inside the user namespace gets no capabilities
    for path in (*SYSTEM_DIRS, *ETC_FILES):
        argv += ["--ro-bind-try", path, path]
    for path in python_dirs(python) if python else []:
        argv += ["--ro-bind", path, path]
    argv += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]
    argv += ["--tmpfs", workspace] if throwaway_workspace else ["--bind", workspace, workspace]
    for path in tmpfs:
        argv += ["--tmpfs", path]
    for source, target in binds:
        argv += ["--bind", str(source), target]
    for source, target in ro_binds:  # after the binds: a file may sit inside a bound folder
        argv += ["--ro-bind", str(source), target]
    argv += ["--remount-ro", "/", "--chdir", workspace, "--clearenv"]
    for key, value in sandbox_env(workspace, env).items():
        argv += ["--setenv", key, value]
    return argv + ["--"]


def signal_of(returncode: int | None, sandboxed: bool) -> int | None:
    """The signal that killed the command: bwrap reports a child killed by signal N as 128+N."""
    if returncode is None:
        return None
    if returncode < 0:
        return -returncode
    if sandboxed and 128 < returncode < 128 + 65:
        return returncode - 128
    return None


@dataclass
class ProcessOutcome:
    returncode: int | None
    stdout: str
    stderr: str
    timed_out: bool = False
    truncated: bool = False
    timeout: float = 0.0
    output_cap: int = 0

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out and not self.truncated

    def describe_exit(self) -> str:
        """One line on how the process ended, with what to do next when it went wrong."""
        if self.timed_out:
            return (
                f"[stopped: still running after {self.timeout:g} s (wall-clock limit); "
                "make it faster, work on less data, or split the job]"
            )
        if self.returncode is not None and self.returncode < 0:
            try:
                sig = signal.Signals(-self.returncode).name
            except ValueError:
                sig = f"signal {-self.returncode}"
            return f"[killed by {sig}; a crash or a resource limit (memory, processes, file size)]"
        return f"[exit code {self.returncode}]"

    def format(self) -> str:
        """stdout, stderr and the exit line as the model reads them."""
        parts = []
        if self.stdout:
            parts.append(self.stdout.rstrip("\n"))
        if self.stderr:
            parts.append("[stderr]\n" + self.stderr.rstrip("\n"))
        if self.truncated:
            parts.append(
                f"[truncated: output exceeded {self.output_cap} bytes, the rest was dropped and the "
                "process stopped; print less, or write big results to a file and read parts of it]"
            )
        parts.append(self.describe_exit())
        return "\n".join(parts)


class _Capture:
    """stdout + stderr share one byte budget, so one stream cannot starve the other's note."""

    def __init__(self, cap: int) -> None:
        self.left = cap
        self.buffers: dict[str, bytearray] = {"out": bytearray(), "err": bytearray()}
        self.overflow = asyncio.Event()

    async def pump(self, stream: asyncio.StreamReader | None, key: str) -> None:
        if stream is None:
            return
        while True:
            chunk = await stream.read(65536)
            if not chunk:
                return
            take = chunk[: max(self.left, 0)]
            self.buffers[key] += take
            self.left -= len(chunk)
            if self.left < 0:
                self.overflow.set()
                return


def kill_group(proc: asyncio.subprocess.Process) -> None:
    """SIGKILL the child's whole process group (it was started in its own session), including
    grandchildren left behind after the leader exited."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    if proc.returncode is None:
        # os.kill, not proc.kill(): Popen.send_signal() polls and may reap the child behind the
        # asyncio child watcher's back ("Unknown child process pid").
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(proc.pid, signal.SIGKILL)


@dataclass(frozen=True)
class Limits:
    """What one tool child may use besides time and output."""

    memory: int  # bytes of address space
    file_size: int  # bytes, the largest file it may write
    processes: int  # enforced only through a pids cgroup (see the module docstring)

    @classmethod
    def for_tools(cls) -> "Limits":
        """terminal and user tools (SANDBOX_* settings)."""
        mb = 1024 * 1024
        return cls(settings.SANDBOX_MEMORY_MB * mb, settings.SANDBOX_MAX_FILE_MB * mb, settings.SANDBOX_MAX_PROCS)

    def wrap(self, argv: list[str]) -> list[str]:
        binary = shutil.which("prlimit")
        if binary is None:
            log.warning("prlimit (util-linux) is missing: tool processes run without memory and file-size limits")
            return argv
        return [binary, f"--as={self.memory}", f"--fsize={self.file_size}", "--core=0", "--", *argv]


class PidsCgroup:
    """A throwaway `pids` cgroup (v1 or v2) capping the process count; None when not writable."""

    ROOTS = ("/sys/fs/cgroup/pids", "/sys/fs/cgroup")

    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def create(cls, max_pids: int) -> "PidsCgroup | None":
        for root in map(Path, cls.ROOTS):
            if not (root / "cgroup.procs").exists():
                continue
            path = root / f"navi-tool-{uuid.uuid4().hex[:12]}"
            try:
                path.mkdir()
                (path / "pids.max").write_text(str(max_pids))
                return cls(path)
            except OSError:
                if path.exists():
                    _rmdir(path)
        return None

    @classmethod
    def for_root(cls, max_pids: int) -> "PidsCgroup | None":
        """A cgroup when the server runs as root (the kernel ignores RLIMIT_NPROC for root)."""
        if os.geteuid() != 0:
            return None
        cgroup = cls.create(max_pids)
        if cgroup is None:
            log.warning("running as root without a writable pids cgroup: tool processes have no process limit")
        return cgroup

    def wrap(self, argv: list[str]) -> list[str]:
        # The shell joins the cgroup, then becomes the command: everything it starts is counted.
        return ["/bin/sh", "-c", 'echo $$ > "$0" && exec "$@"', str(self.path / "cgroup.procs"), *argv]

    def remove(self) -> None:
        _rmdir(self.path)


def _rmdir(path: Path) -> None:
    """Killed processes leave the cgroup a moment after they die; retry briefly."""
    for _ in range(100):
        try:
            path.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.01)
    log.warning("could not remove cgroup %s", path)


async def run_process(
    argv: list[str],
    *,
    cwd: str | Path,
    env: dict[str, str],
    timeout: float,
    output_cap: int,
    stdin_data: bytes | None = None,
    limits: Limits | None = None,
) -> ProcessOutcome:
    """Run argv; never outlives the call (timeout, overflow or cancellation kill the group)."""
    if limits is None:
        return await _run(argv, cwd, env, timeout, output_cap, stdin_data)
    cgroup = PidsCgroup.for_root(limits.processes)
    argv = limits.wrap(argv)
    try:
        return await _run(cgroup.wrap(argv) if cgroup else argv, cwd, env, timeout, output_cap, stdin_data)
    finally:
        if cgroup is not None:
            await asyncio.shield(asyncio.to_thread(cgroup.remove))


async def _run(
    argv: list[str], cwd: str | Path, env: dict[str, str], timeout: float, output_cap: int, stdin_data: bytes | None
) -> ProcessOutcome:
    proc = await asyncio.create_subprocess_exec(
        *argv,
        cwd=str(cwd),
        env=env,
        stdin=asyncio.subprocess.PIPE if stdin_data is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,
    )
    capture = _Capture(output_cap)
    timed_out = False
    readers = asyncio.gather(capture.pump(proc.stdout, "out"), capture.pump(proc.stderr, "err"))
    try:
        if stdin_data is not None and proc.stdin is not None:
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                proc.stdin.write(stdin_data)
                await proc.stdin.drain()
            proc.stdin.close()
        overflow = asyncio.ensure_future(capture.overflow.wait())
        finished = asyncio.ensure_future(_finish(proc, readers))
        try:
            done, _ = await asyncio.wait({finished, overflow}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            overflow.cancel()
            finished.cancel()
        timed_out = not done
    finally:
        # Also reached on CancelledError (Stop): nothing keeps running, nothing is left unreaped.
        kill_group(proc)
        readers.cancel()
        await asyncio.shield(_reap(proc, readers))
    return ProcessOutcome(
        returncode=proc.returncode,
        stdout=capture.buffers["out"].decode("utf-8", "replace"),
        stderr=capture.buffers["err"].decode("utf-8", "replace"),
        timed_out=timed_out,
        truncated=capture.overflow.is_set(),
        timeout=timeout,
        output_cap=output_cap,
    )


async def _finish(proc: asyncio.subprocess.Process, readers: asyncio.Future) -> None:
    await asyncio.shield(readers)
    await proc.wait()


async def _reap(proc: asyncio.subprocess.Process, readers: asyncio.Future) -> None:
    """Read the pipes to EOF and wait for the exit status. asyncio's wait() only returns once
    the pipes are closed, and a reader paused on a full buffer would never see EOF."""

    async def drain(stream: asyncio.StreamReader | None) -> None:
        while stream is not None and await stream.read(65536):
            pass

    with contextlib.suppress(asyncio.CancelledError, Exception):
        await readers  # let the cancelled pumps finish before draining the same streams
    try:
        await asyncio.wait_for(asyncio.gather(drain(proc.stdout), drain(proc.stderr)), 2.0)
    except (asyncio.TimeoutError, RuntimeError, ConnectionError):
        transport = getattr(proc, "_transport", None)  # a writer escaped the kill: stop listening
        if transport is not None:
            transport.close()
    with contextlib.suppress(asyncio.TimeoutError, ProcessLookupError):
        await asyncio.wait_for(proc.wait(), 2.0)
