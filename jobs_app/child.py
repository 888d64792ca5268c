"""Untrusted input is read in a child process with limits of its own: address space
(RLIMIT_AS), CPU time (RLIMIT_CPU) and a wall-clock timeout. The child sets the first two on
itself before it opens the input (`apply_own_limits`, called first by its entry point), and
dies with the thread that started it; the parent watches the clock, the cancellation check and
the child's progress lines (`progress 0.42`), and kills the child's whole process group on a
timeout or a cancel. Stdlib only: a child imports this without Django.
"""

from __future__ import annotations

import os
import resource
import selectors
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Callable

MB = 1024 * 1024
ENV = "NAVI_CHILD_LIMITS"  # "memory_mb,cpu_s"
PROGRESS = "progress "


@dataclass(frozen=True)
class Limits:
    memory_mb: int
    cpu_s: int
    wall_s: float


@dataclass
class Outcome:
    """How the child ended: `status` ok | error | memory | cpu | killed | timeout | crashed, its result
    lines (everything it printed but progress), and the tail of its stderr for the log."""

    status: str
    lines: list[str] = field(default_factory=list)
    returncode: int | None = None
    stderr: str = ""
    seconds: float = 0.0


class Cancelled(Exception):
    """The parent's check said stop (the job was cancelled, or the worker is stopping)."""


def apply_own_limits() -> None:
    """In the child, before it touches its input: the limits its parent asked for, no core
    dumps, and death with the parent (Linux: PR_SET_PDEATHSIG)."""
    spec = os.environ.get(ENV, "")
    if spec:
        memory_mb, cpu_s = (int(part) for part in spec.split(","))
        if memory_mb > 0:
            resource.setrlimit(resource.RLIMIT_AS, (memory_mb * MB, memory_mb * MB))
        if cpu_s > 0:
            resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 1))  # SIGXCPU, then SIGKILL a second later
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if sys.platform.startswith("linux"):
        import ctypes  # noqa: PLC0415 - only here, only on Linux

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG
        if os.getppid() == 1:  # the parent died before the line above
            os._exit(1)


def run(argv: list[str], limits: Limits, *, check: Callable[[], str | None], on_progress: Callable[[float], None],
        poll_s: float = 0.2, env: dict[str, str] | None = None, cwd: str | None = None) -> Outcome:
    """Run the child to its end. `check()` is asked every `poll_s`: a non-empty answer kills the
    child and raises Cancelled with it."""
    started = time.monotonic()
    child_env = {**os.environ, **(env or {}), ENV: f"{limits.memory_mb},{limits.cpu_s}"}
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                            env=child_env, start_new_session=True, close_fds=True, cwd=cwd)
    lines: list[str] = []
    stderr_tail = b""
    buffers = {proc.stdout: b"", proc.stderr: b""}
    selector = selectors.DefaultSelector()
    selector.register(proc.stdout, selectors.EVENT_READ)
    selector.register(proc.stderr, selectors.EVENT_READ)
    timed_out = False
    try:
        open_streams = 2
        while open_streams:
            for key, _ in selector.select(timeout=poll_s):
                chunk = os.read(key.fileobj.fileno(), 65536)
                if not chunk:
                    selector.unregister(key.fileobj)
                    open_streams -= 1
                    continue
                if key.fileobj is proc.stderr:
                    stderr_tail = (stderr_tail + chunk)[-4096:]
                    continue
                data = buffers[proc.stdout] + chunk
                *complete, buffers[proc.stdout] = data.split(b"\n")
                for raw in complete:
                    line = raw.decode("utf-8", "replace")
                    if line.startswith(PROGRESS):
                        try:
                            on_progress(float(line[len(PROGRESS):]))
                        except ValueError:
                            pass
                    elif len(lines) < 100:
                        lines.append(line)
            reason = check()
            if reason:
                _kill(proc)
                raise Cancelled(reason)
            if time.monotonic() - started > limits.wall_s:
                timed_out = True
                _kill(proc)
                break
        proc.wait(timeout=limits.wall_s)
    except BaseException:
        _kill(proc)
        raise
    finally:
        selector.close()
        for stream in (proc.stdout, proc.stderr):
            stream.close()
    seconds = time.monotonic() - started
    tail = stderr_tail.decode("utf-8", "replace")
    return Outcome(_status(proc.returncode, lines, timed_out, tail), lines, proc.returncode, tail, seconds)


def _status(code: int | None, lines: list[str], timed_out: bool, stderr: str) -> str:
    if timed_out:
        return "timeout"
    if code == -signal.SIGXCPU:
        return "cpu"  # the kernel's signal at RLIMIT_CPU
    if code == -signal.SIGKILL:
        return "killed"  # RLIMIT_CPU's hard limit, or the kernel's OOM killer (we say so when it is us)
    if any(line == "memory" for line in lines) or "MemoryError" in stderr:
        return "memory"
    if code == 0:
        return "ok"
    if lines and lines[-1].startswith("error "):
        return "error"
    return "crashed"


def _kill(proc: subprocess.Popen) -> None:
    """SIGKILL to the child's process group (it has its own), then reap it."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass
