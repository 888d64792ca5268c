"""Context variables the agent sets and tools read."""

from __future__ import annotations

import asyncio
from contextvars import ContextVar
from typing import Callable

# Session id for per-session tool state (scratchpad, todo, SSH pool); "subagent_<uuid12>" in
# sub-agents so their state is isolated from the parent's.
current_session_id: ContextVar[str | None] = ContextVar("current_session_id", default=None)
# Queue a tool may put AgentEvents into (sub-agent events, memory_saved); the loop drains it
# while the tool runs and forwards the events to the client in real time.
current_event_sink: ContextVar[asyncio.Queue | None] = ContextVar("current_event_sink", default=None)
# Set when the owner presses Stop; checked before each LLM call, mid-stream and around tools.
current_stop_event: ContextVar[asyncio.Event | None] = ContextVar("current_stop_event", default=None)
# The user the run belongs to (memory is per user); None outside a run.
current_user_id: ContextVar[int | None] = ContextVar("current_user_id", default=None)
# The id of the run in flight (RunManager), for the audit of tool calls.
current_run_id: ContextVar[str] = ContextVar("current_run_id", default="")
# Who started the run: "" for a person in a chat, or what the starter said (e.g. "routine" for
# a scheduled run), so a tool can ask before acting on an unattended run's behalf.
current_run_origin: ContextVar[str] = ContextVar("current_run_origin", default="")
# How long an approval of this run may wait (None: APPROVAL_TIMEOUT_S); unattended runs wait longer.
current_approval_timeout_s: ContextVar[float | None] = ContextVar("current_approval_timeout_s", default=None)
# The untrusted content the model had in view when it made the tool call in flight ("" when
# none): a tool that stores something a later turn reads (a routine, a memory fact, notes)
# stores this mark with it.
current_taint: ContextVar[str] = ContextVar("current_taint", default="")
# What the run's own instruction came from when that was not the owner (a routine made in a
# chat after it read untrusted content): such a run starts tainted.
current_run_taint: ContextVar[str] = ContextVar("current_run_taint", default="")
# The small-model repair groups in force for the run's profile (agent.toolcalling.guards.ledger):
# empty for a big model's profile; None outside an agent's turn (a tool called over MCP): all on.
current_repairs: ContextVar[frozenset[str] | None] = ContextVar("current_repairs", default=None)
# Where a tool's own repair says it acted (the agent sets its ledger's `fired`); None: nobody counts.
current_repair_fired: ContextVar[Callable[[str], None] | None] = ContextVar("current_repair_fired", default=None)
# The real chat session id (a sub-agent keeps its parent's here), for session files.
current_chat_session_id: ContextVar[str | None] = ContextVar("current_chat_session_id", default=None)


def repair_on(group: str) -> bool:
    """Whether a small-model repair group runs for the tool call in flight (see current_repairs)."""
    repairs = current_repairs.get()
    return repairs is None or group in repairs


def repair_fired(group: str) -> None:
    """A tool's own small-model repair of `group` changed what the model wrote: counted for the
    turn (agent.toolcalling.guards.ledger.fired); never raises."""
    record = current_repair_fired.get()
    if record is not None:
        try:
            record(group)
        except Exception:  # a count is not worth a tool call
            pass


def emit(event) -> None:
    """Send an AgentEvent to the client from inside a tool (no-op outside a run)."""
    sink = current_event_sink.get()
    if sink is not None:
        sink.put_nowait(event)
