"""Periodic work that apps register from their AppConfig.ready: every worker process runs what is
due from its main loop (checks that enqueue a task when one is needed, never the work itself).
Two workers may both run an entry: each must be safe to run twice (`queue.enqueue_once`)."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Callable

log = logging.getLogger(__name__)


@dataclass
class Entry:
    name: str
    every_s: float
    func: Callable[[], object]
    next_at: float = 0.0  # monotonic; 0 = at the worker's start


_entries: dict[str, Entry] = {}


def every(seconds: float, name: str, func: Callable[[], object]) -> None:
    """Run `func` at a worker's start and every `seconds` after (one entry per name)."""
    _entries[name] = Entry(name, seconds, func)


def run_due(now: float | None = None) -> None:
    now = time.monotonic() if now is None else now
    for entry in list(_entries.values()):
        if now < entry.next_at:
            continue
        entry.next_at = now + entry.every_s
        try:
            entry.func()
        except Exception:  # one check's failure is logged; the worker and the other checks go on
            log.exception("periodic job check %r failed", entry.name)


def reset() -> None:
    """Everything due again (a new worker process, or a test)."""
    for entry in _entries.values():
        entry.next_at = 0.0
