"""What a running task may ask about the process it runs in (no Django models: importable anywhere)."""

from __future__ import annotations

import threading

stopping = threading.Event()  # set when the worker process is asked to stop: tasks end their slice early


def should_stop() -> bool:
    return stopping.is_set()
