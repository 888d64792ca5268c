"""The job workers `python -m navi_project.serve` starts beside the web server (what `make run`
runs): `manage.py db_worker` child processes, so one command and one Ctrl-C serve both. They
stay in the server's process group (a terminal's Ctrl-C reaches them too) and die with it
(NAVI_PARENT_PID: the worker asks Linux for SIGTERM when its parent goes); one that exits on its
own is started again after a back-off (1, 2, 4 … 30 s); the server's end stops them
(SIGTERM: running slices end, their jobs go on in the next worker).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BACKOFF_S = (1.0, 2.0, 4.0, 8.0, 16.0, 30.0)
STEADY_S = 30.0  # a worker up this long crashed "afresh": its back-off starts over
PARENT_ENV = "NAVI_PARENT_PID"


def _say(line: str) -> None:
    print(f"==> {line}", file=sys.stderr, flush=True)


class JobWorkers:
    def __init__(self, count: int, extra_args: list[str] | None = None) -> None:
        self.count = count
        self.extra_args = extra_args or []
        self.procs: list[subprocess.Popen | None] = [None] * count
        self.started: list[float] = [0.0] * count
        self.crashes: list[int] = [0] * count
        self.restart_at: list[float | None] = [None] * count
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def start(self) -> JobWorkers:
        for number in range(self.count):
            self._spawn(number)
        self._thread = threading.Thread(target=self._watch, name="job-worker-supervisor", daemon=True)
        self._thread.start()
        return self

    def _spawn(self, number: int) -> None:
        argv = [sys.executable, str(ROOT / "manage.py"), "db_worker", *self.extra_args]
        env = {**os.environ, PARENT_ENV: str(os.getpid())}
        with self._lock:
            if self._stop.is_set():
                return
            self.procs[number] = subprocess.Popen(argv, cwd=ROOT, env=env, stdin=subprocess.DEVNULL)
            self.started[number], self.restart_at[number] = time.monotonic(), None

    def pids(self) -> list[int]:
        return [p.pid for p in self.procs if p is not None and p.poll() is None]

    def _watch(self) -> None:
        while not self._stop.wait(0.5):
            now = time.monotonic()
            for number, proc in enumerate(self.procs):
                if self.restart_at[number] is not None:
                    if now >= self.restart_at[number]:
                        _say(f"starting job worker {number + 1} again")
                        self._spawn(number)
                    continue
                if proc is None or proc.poll() is None:
                    continue
                up = now - self.started[number]
                self.crashes[number] = self.crashes[number] + 1 if up < STEADY_S else 1
                delay = BACKOFF_S[min(self.crashes[number], len(BACKOFF_S)) - 1]
                self.restart_at[number] = now + delay
                _say(f"job worker {number + 1} exited with code {proc.returncode} after {up:.0f} s; "
                     f"starting it again in {delay:.0f} s (its jobs are taken back meanwhile)")

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM to each worker, then wait for all; whoever is still there after `timeout` is killed."""
        with self._lock:
            self._stop.set()
        running = [p for p in self.procs if p is not None and p.poll() is None]
        for proc in running:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for proc in running:
            try:
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _say(f"job worker (pid {proc.pid}) did not stop within {timeout:.0f} s; killing it")
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                proc.wait(timeout=5)


def die_with_parent() -> None:
    """In a worker started by JobWorkers: SIGTERM when the server goes (Linux), and no start at
    all if it is gone already."""
    parent = os.environ.get(PARENT_ENV)
    if not parent:
        return
    if sys.platform.startswith("linux"):
        import ctypes  # noqa: PLC0415 - Linux only

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG
    if os.getppid() != int(parent):
        sys.exit("the server that started this job worker is gone")
