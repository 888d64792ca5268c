"""One way to run a child process for a tool: own process group, wall-clock timeout, capped
output, and the whole group killed on timeout, on overflow and when the tool task is cancelled
(Stop). code_exec, terminal and user tools all go through `run_process`."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from dataclasses import dataclass
from pathlib import Path

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


async def run_process(
    argv: list[str],
    *,
    cwd: str | Path,
    env: dict[str, str],
    timeout: float,
    output_cap: int,
    stdin_data: bytes | None = None,
) -> ProcessOutcome:
    """Run argv; never outlives the call (timeout, overflow or cancellation kill the group)."""
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
