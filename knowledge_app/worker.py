"""One background thread per process that indexes documents and embeds facts, in order.

Jobs are keyed: a job already waiting is not queued twice (ten saves of one fact, one
re-embedding). `wait_idle` lets a command or a test wait until everything queued is done.
"""

from __future__ import annotations

import logging
import queue
import threading
from typing import Callable

from django.db import close_old_connections, connection

log = logging.getLogger(__name__)


class Worker:
    def __init__(self) -> None:
        self._queue: queue.Queue[tuple[str, Callable[[], None]]] = queue.Queue()
        self._waiting: set[str] = set()
        self._busy = 0
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None

    def submit(self, key: str, job: Callable[[], None]) -> None:
        with self._cond:
            if key in self._waiting:
                return
            self._waiting.add(key)
            self._busy += 1
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="knowledge-worker", daemon=True)
                self._thread.start()
        self._queue.put((key, job))

    def _run(self) -> None:
        while True:
            key, job = self._queue.get()
            with self._cond:
                self._waiting.discard(key)
            try:
                close_old_connections()
                job()
            except Exception:  # a job's failure is its own (documents record it); the thread goes on
                log.exception("knowledge job %s failed", key)
            finally:
                connection.close()  # this thread's connection: nothing holds the database between jobs
                with self._cond:
                    self._busy -= 1
                    self._cond.notify_all()

    def wait_idle(self, timeout: float) -> bool:
        """True once every queued job has finished (False after `timeout` seconds)."""
        with self._cond:
            return self._cond.wait_for(lambda: self._busy == 0, timeout=timeout)


worker = Worker()
