"""Memory extraction's manners as a background job: low priority beside the owner's turns.

A local model server often has one slot: an extraction call beside the owner's turn makes the
turn wait (or time out). So the job (agent.memory.tasks.extract_memory) starts only once the
owner has been idle for MEMORY_EXTRACTION_IDLE_S with no turn running (else it is deferred),
runs on the workers' `serial` queue (one extraction at a time per worker process), and a call
in flight is abandoned (its HTTP request closed) as soon as one of the owner's turns starts; the
session stays stale and is retried on the next trigger.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from datetime import timedelta
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.utils import timezone

from agent.memory.extraction import ExtractionPostponed
from agent.runs.manager import CLAIM_TTL
from sessions_app.models import Session

POLL_S = 0.5
MAX_WAIT_S = 15 * 60  # an owner busy for this long: give up until the next trigger


def owner_busy(owner_id: int) -> bool:
    """True while one of the owner's turns runs (any process) or was active moments ago."""
    now = timezone.now()
    if Session.objects.filter(
        owner_id=owner_id, active_run_heartbeat__gte=now - CLAIM_TTL
    ).exclude(active_run_id="").exists():
        return True
    idle = timedelta(seconds=settings.MEMORY_EXTRACTION_IDLE_S)
    return idle > timedelta(0) and Session.objects.filter(owner_id=owner_id, last_active__gt=now - idle).exists()


def wait_until_idle(owner_id: int, max_wait_s: float = MAX_WAIT_S) -> bool:
    """Block until the owner is idle; False when that did not happen within `max_wait_s`."""
    deadline = time.monotonic() + max_wait_s
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
