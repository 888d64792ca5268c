"""Memory extraction in the background when a session is created (never delays the response).

The work runs in a daemon thread with its own DB connection. `memory_saved` frames are sent on
the server's event loop when there is one (the in-memory channel layer's queues belong to it),
otherwise through `async_to_sync` (Redis layer, management commands, tests).
"""

from __future__ import annotations

import asyncio
import logging
import threading

from asgiref.sync import async_to_sync
from django.db import connections

from . import extraction

log = logging.getLogger(__name__)

_lock = threading.Lock()
_running: set[int] = set()  # owners with an extraction in progress
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


def on_session_created(session) -> None:
    """session_created hook: extract the owner's stale sessions in a background thread."""
    owner_id = session.owner_id
    if not extraction.stale_sessions(owner_id=owner_id).exists():
        return  # the common case: nothing to do, no thread
    with _lock:
        if owner_id in _running:
            return
        _running.add(owner_id)
    loop = _server_loop()
    thread = threading.Thread(target=_work, args=(owner_id, loop), name=f"memory-extract-{owner_id}", daemon=True)
    threads[:] = [t for t in threads if t.is_alive()] + [thread]
    thread.start()


def _work(owner_id: int, loop: asyncio.AbstractEventLoop | None) -> None:
    def notify(session_id: str, fact: dict) -> None:
        if loop is not None and loop.is_running():
            future = asyncio.run_coroutine_threadsafe(_send(session_id, fact), loop)
            try:
                future.result(timeout=10)
            except Exception:
                log.warning("could not announce memory_saved to session %s", session_id, exc_info=True)
        else:
            extraction.notify_memory_saved(session_id, fact)

    try:
        count = extraction.extract_stale_sessions(owner_id, notify=notify)
        if count:
            log.info("memory: extracted facts from %d stale session(s)", count)
    except Exception:
        log.exception("background memory extraction failed")
    finally:
        with _lock:
            _running.discard(owner_id)
        connections.close_all()


async def _send(session_id: str, fact: dict) -> None:
    from channels.layers import get_channel_layer

    from agent.runs import frames_group

    frame = {"type": "memory_saved", **fact}
    await get_channel_layer().group_send(frames_group(session_id), {"type": "run.event", "frame": frame})
