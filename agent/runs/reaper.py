"""Runs whose worker died (kill -9, a crash): every worker looks for them now and then and
finishes what they left half-done.

A run's claim on its session is kept alive by its worker's heartbeat (agent.runs, every 5 s);
once it is older than the claim's TTL the worker is gone. The first worker to see that takes the
claim back with a conditional UPDATE (so two workers never finish the same run), marks the
answer left `partial` as `interrupted` (its text kept), adds a line saying what happened, and
tells every socket watching the chat (`resume_unavailable`: the page reloads the history).
Without this, a chat nobody writes in again (a one-shot routine's) stayed "running" for good.
"""

from __future__ import annotations

import asyncio
import logging

from channels.layers import get_channel_layer
from django.db.models import Q
from django.utils import timezone

from agent.frames.groups import frames_group, run_event
from agent.runs.manager import get_run_manager
from navi_project.hop import db_hop
from sessions_app import history
from sessions_app.models import Message, Session

log = logging.getLogger(__name__)

INTERVAL_S = 10.0  # a dead run is finished within the claim's TTL (30 s) + this
LOST_TEXT = ("The server process writing this answer stopped (a crash or a kill) before it was finished; what was "
             "written so far is kept. Send the message again for a full answer.")


def reap_dead_runs(alive: frozenset[str] = frozenset()) -> list[tuple[str, str]]:
    """(session id, run id) of every run whose claim lapsed, now finished: its claim cleared,
    its partial answer interrupted, a line added. Sync; one worker wins each run. Runs in
    `alive` (this process's own, only late with their heartbeat) are left alone."""
    lapsed = Q(active_run_heartbeat__isnull=True) | Q(active_run_heartbeat__lt=timezone.now() - history.RUN_CLAIM_TTL)
    dead = list(Session.objects.exclude(active_run_id="").filter(lapsed).values_list("pk", "active_run_id"))
    reaped = []
    for session_id, run_id in dead:
        if run_id in alive:
            continue
        taken = Session.objects.filter(lapsed, pk=session_id, active_run_id=run_id).update(
            active_run_id="", active_run_heartbeat=None
        )
        if taken != 1:
            continue  # another worker reaped it, or its run came back to life
        Message.objects.filter(session_id=session_id, status=Message.Status.PARTIAL).update(
            status=Message.Status.INTERRUPTED
        )
        history.add_marker(str(session_id), "error", LOST_TEXT)
        reaped.append((str(session_id), run_id))
    return reaped


async def reap_once() -> list[tuple[str, str]]:
    """One pass, and a frame to the sockets of each chat it finished."""
    own = frozenset(run.run_id for run in get_run_manager().active.values())
    reaped = await db_hop(reap_dead_runs, own)
    if reaped:
        log.warning("finished %d run(s) whose worker died: answers kept as interrupted", len(reaped))
        layer = get_channel_layer()
        for session_id, run_id in reaped:
            await layer.group_send(frames_group(session_id), run_event({"type": "resume_unavailable", "run_id": run_id}))
    return reaped


async def reap_forever(interval: float = INTERVAL_S) -> None:
    while True:
        try:
            await reap_once()
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("finishing dead workers' runs failed; trying again in %.0f s", interval)
        await asyncio.sleep(interval)
