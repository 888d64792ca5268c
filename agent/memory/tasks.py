"""Memory extraction as a job (Django's Tasks API; run by the job workers, never the web server).

A new chat queues one for its owner when some of their chats are stale (`on_session_created`):
facts are read from those chats, one LLM call at a time on the workers' `serial` queue, and
announced as `memory_saved` frames (through the channel layer: with Redis they reach the owner's
open tabs from any worker; with the in-memory layer a worker process reaches none, and the
facts show in Settings → Memory).
"""

from __future__ import annotations

import logging
import time

from django.conf import settings
from django_tasks import task

from agent.memory import extraction
from agent.memory.background import MAX_WAIT_S, LowPriorityBackend, owner_busy
from jobs_app import queue
from memory_app.extraction import stale_sessions

log = logging.getLogger(__name__)


@task(queue_name=queue.SERIAL)
def extract_memory(owner_id: int, waiting_since: float = 0.0) -> str:
    """The owner's stale chats → facts and summary, once the owner is idle; deferred while they
    are busy (given up after MAX_WAIT_S, until the next trigger)."""
    waiting_since = waiting_since or time.time()
    if owner_busy(owner_id):
        if time.time() - waiting_since > MAX_WAIT_S:
            return "postponed"
        queue.enqueue(extract_memory, delay_s=max(0.5, min(settings.MEMORY_EXTRACTION_IDLE_S, 5.0)),
                      owner_id=owner_id, waiting_since=waiting_since)
        return "postponed"
    count = extraction.extract_stale_sessions(
        owner_id, notify=extraction.notify_memory_saved,
        wrap_backend=lambda backend: LowPriorityBackend(backend, owner_id))
    if count:
        log.info("memory: extracted facts from %d stale session(s)", count)
    return "ok"


def on_session_created(sender, session, **kwargs) -> None:
    """`session_created` receiver: a job for the owner's stale chats, unless one waits already."""
    if stale_sessions(owner_id=session.owner_id).exists():
        queue.enqueue_once(extract_memory, owner_id=session.owner_id)
