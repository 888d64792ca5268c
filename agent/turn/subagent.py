"""A sub-agent's events on their way to the run that spawned it: its tool steps, thinking and
approvals are forwarded marked as the sub-agent's, its text shows in its card as it comes, and its
answer becomes the spawn_agent result instead of the parent's text."""

from __future__ import annotations

import asyncio
from typing import AsyncIterator

from agent.frames.events import (
    AgentEvent,
    ApprovalRequired,
    ApprovalResolved,
    ErrorEvent,
    StreamEnd,
    StreamStopped,
    SubagentTextDelta,
    TextDelta,
    ThinkingDelta,
    ThinkingEnd,
    ToolEvent,
    ToolStarted,
    TurnThinking,
    mark_subagent,
)

# Events a sub-agent forwards to its parent (its text becomes the spawn_agent result instead).
_SUBAGENT_FORWARDED = (ToolStarted, ToolEvent, TurnThinking, ApprovalRequired, ApprovalResolved)


async def relay(events: AsyncIterator[AgentEvent], parent_sink: asyncio.Queue | None) -> tuple[str, str]:
    """(the sub-agent's answer, what went wrong or ""), its events forwarded to `parent_sink`."""
    content, problem = "", ""
    async for event in events:
        if isinstance(event, StreamEnd):
            content = event.content
        elif isinstance(event, ErrorEvent):
            problem = event.message
        elif isinstance(event, StreamStopped):
            problem = "stopped by the owner"
        elif parent_sink is not None and isinstance(event, _SUBAGENT_FORWARDED):
            parent_sink.put_nowait(mark_subagent(event))
        elif parent_sink is not None and isinstance(event, TextDelta):
            parent_sink.put_nowait(SubagentTextDelta(event.delta))  # its card shows the text as it comes
        elif parent_sink is not None and not isinstance(event, (ThinkingDelta, ThinkingEnd)):
            parent_sink.put_nowait(event)
    return content, problem
