"""Memory extraction in the background when a session is created (never delays the response).

A local model server often has one slot: an extraction call beside the owner's turn makes the
turn wait (or time out). So extraction runs at low priority: one call at a time in one daemon
thread per process, only once the owner has been idle for MEMORY_EXTRACTION_IDLE_S with no
turn running, and a call in flight is abandoned (its HTTP request closed) as soon as one of the
owner's turns starts; the session stays stale and is retried on the next trigger.

`memory_saved` frames are sent on the server's event loop when there is one (the in-memory
channel layer's queues belong to it), otherwise through `async_to_sync`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from datetime import timedelta
from typing import Any

from asgiref.sync import async_to_sync, sync_to_async
from channels.layers import get_channel_layer
from django.conf import settings
from django.db import connections
from django.utils import timezone

from agent.frames.groups import frames_group
from agent.memory import extraction
from agent.memory.extraction import ExtractionPostponed
from agent.runs.manager import CLAIM_TTL
from memory_app.extraction import stale_sessions
from sessions_app.models import Session

log = logging.getLogger(__name__)

POLL_S = 0.5
MAX_WAIT_S = 15 * 60  # an owner busy for this long: give up until the next trigger

_lock = threading.Lock()
_queue: list[int] = []  # owners waiting for extraction, in order
_current: int | None = None
_worker: threading.Thread | None = None
threads: list[threading.Thread] = []  # started threads (tests join them)


async def _running_loop() -> asyncio.AbstractEventLoop:
    return asyncio.get_running_loop()


def _server_loop() -> asyncio.AbstractEventLoop | None:
    """The ASGI server's loop when called from a sync view running under it, else None."""
    try:
        loop = async_to_sync(_running_loop)()
    except RuntimeError:  # called from async code: that loop is the server's
        try:
            return asyncio.get_running_loop()
        except RuntimeError:
            return None
    return loop if loop.is_running() else None


def on_session_created(sender, session, **kwargs) -> None:
    """`session_created` receiver: queue the owner's stale sessions for the extraction thread."""
    global _worker
    owner_id = session.owner_id
    if not stale_sessions(owner_id=owner_id).exists():
        return  # the common case: nothing to do, no thread
    loop = _server_loop()
    with _lock:
        if owner_id not in _queue and owner_id != _current:
            _queue.append(owner_id)
        if _worker is not None and _worker.is_alive():
            return
        _worker = threading.Thread(target=_work, args=(loop,), name="memory-extract", daemon=True)
        threads[:] = [t for t in threads if t.is_alive()] + [_worker]
        _worker.start()


def _work(loop: asyncio.AbstractEventLoop | None) -> None:
    """Drain the queue, one owner and one LLM call at a time, then end."""
    global _current, _worker
    try:
        while True:
            with _lock:
                if not _queue:
                    _current = _worker = None
                    return
                _current = _queue.pop(0)
            try:
                _extract_owner(_current, loop)
            except Exception:
                log.exception("background memory extraction failed")
    finally:
        with _lock:
            _current = None
            if _worker is threading.current_thread():
                _worker = None
        connections.close_all()


def _extract_owner(owner_id: int, loop: asyncio.AbstractEventLoop | None) -> None:
    def notify(session_id: str, fact: dict) -> None:
        if loop is not None and loop.is_running():
            future = asyncio.run_coroutine_threadsafe(_send(session_id, fact), loop)
            try:
                future.result(timeout=10)
            except Exception:
                log.warning("could not announce memory_saved to session %s", session_id, exc_info=True)
        else:
            extraction.notify_memory_saved(session_id, fact)

    count = extraction.extract_stale_sessions(
        owner_id, notify=notify, wrap_backend=lambda backend: LowPriorityBackend(backend, owner_id)
    )
    if count:
        log.info("memory: extracted facts from %d stale session(s)", count)


def owner_busy(owner_id: int) -> bool:
    """True while one of the owner's turns runs (any process) or was active moments ago."""
    now = timezone.now()
    if Session.objects.filter(
        owner_id=owner_id, active_run_heartbeat__gte=now - CLAIM_TTL
    ).exclude(active_run_id="").exists():
        return True
    idle = timedelta(seconds=settings.MEMORY_EXTRACTION_IDLE_S)
    return idle > timedelta(0) and Session.objects.filter(owner_id=owner_id, last_active__gt=now - idle).exists()


def wait_until_idle(owner_id: int) -> bool:
    """Block until the owner is idle; False when that did not happen within MAX_WAIT_S."""
    deadline = time.monotonic() + MAX_WAIT_S
    while owner_busy(owner_id):
        if time.monotonic() > deadline:
            return False
        time.sleep(POLL_S)
    return True


class LowPriorityBackend:
    """A backend whose `complete` waits for the owner to be idle and gives way to their turns."""

    def __init__(self, inner: Any, owner_id: int) -> None:
        self.inner = inner
        self.owner_id = owner_id
        self.name = inner.name

    async def complete(self, *args: Any, **kwargs: Any) -> Any:
        if not await sync_to_async(wait_until_idle)(self.owner_id):
            raise ExtractionPostponed("the owner stayed busy; extraction postponed")
        call = asyncio.ensure_future(self.inner.complete(*args, **kwargs))
        try:
            while True:
                done, _ = await asyncio.wait({call}, timeout=POLL_S)
                if done:
                    return call.result()
                if await sync_to_async(owner_busy)(self.owner_id):
                    raise ExtractionPostponed("a turn of the owner started; extraction gave way to it")
        finally:
            if not call.done():
                call.cancel()  # closes the HTTP request: the server stops generating
                with contextlib.suppress(BaseException):
                    await call


async def _send(session_id: str, fact: dict) -> None:
    await get_channel_layer().group_send(frames_group(session_id), extraction.memory_saved_event(fact))
