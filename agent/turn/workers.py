"""Post-turn (and pre-turn) workers: work that runs around a turn, e.g. context compression.

A worker gets a WorkerContext and returns WorkerResult.events, which the loop yields after
stream_end (post-turn) or before the LLM call (pre-turn). A failing worker is logged and the
turn goes on.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from django.conf import settings

from agent.frames.events import AgentEvent, StreamStopped
from agent.turn.stopping import Stopped, until_stopped
from tools_app.context import current_stop_event

if TYPE_CHECKING:
    from agent.context.conversation import Conversation
    from agent.llm import LLMBackend
    from agent.models import Profile

log = logging.getLogger(__name__)


@dataclass
class WorkerContext:
    conversation: "Conversation"
    profile: "Profile"
    backend: "LLMBackend"
    token_count: int
    max_tokens: int
    phase: str  # "pre" or "post"


@dataclass
class WorkerResult:
    events: list[AgentEvent] = field(default_factory=list)


class Worker:
    name = "worker"

    def wanted(self, ctx: WorkerContext) -> bool:
        """Whether `run` has anything to do (sync, cheap). A worker that is not wanted costs no
        task and no trip through the event loop: before the LLM call that was ~0.2 ms of every
        turn, and the run's first frame went out before the model's request."""
        return True

    async def run(self, ctx: WorkerContext) -> WorkerResult:  # pragma: no cover - interface
        raise NotImplementedError


# Registered at start-up by the apps that provide workers (agent.turn.compression adds its own).
pre_turn_workers: list[Worker] = []
post_turn_workers: list[Worker] = []


async def run_workers(workers: list[Worker], ctx: WorkerContext) -> list[AgentEvent]:
    """Run each worker, raced against Stop: a stopped worker is cancelled (its LLM request
    closed) and the rest are skipped. After the answer (phase "post") a stop ends the run with
    stream_stopped here; before it, the loop reports the stop itself."""

    stop = current_stop_event.get()
    events: list[AgentEvent] = []
    for worker in workers:
        if not worker.wanted(ctx):
            continue
        try:
            result = await until_stopped(worker.run(ctx), stop)
            events.extend(result.events)
        except Stopped:
            log.info("worker %s stopped by the owner", worker.name)
            if ctx.phase == "post":
                events.append(StreamStopped())
            break
        except Exception:
            log.warning("worker %s failed; the turn goes on", worker.name, exc_info=True)
    return events


async def run_phase(
    registered: list[Worker], conv: "Conversation", profile: "Profile", backend: "LLMBackend", phase: str, limit: int
) -> list[AgentEvent]:
    """Run the workers registered for one side ("pre" or "post") of a turn."""
    if not registered:
        return []
    ctx = WorkerContext(
        conversation=conv, profile=profile, backend=backend, token_count=conv.token_count,
        max_tokens=limit or settings.OLLAMA_NUM_CTX, phase=phase,
    )
    return await run_workers(registered, ctx)
