"""AgentEvent types — one dataclass per server frame of the WebSocket protocol — and the one
function that turns an event into its JSON frame. The base class and the frames tools emit
(memory_saved, file_published) are defined in tools_app.events and re-exported here."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tools_app.events import AgentEvent, FilePublished, MemorySaved, ToolProgress


@dataclass
class StreamStart(AgentEvent):
    user_message: str = ""  # lets other tabs show the message that started the run
    type = "stream_start"


@dataclass
class ThinkingDelta(AgentEvent):
    delta: str
    type = "thinking_delta"


@dataclass
class ThinkingEnd(AgentEvent):
    type = "thinking_end"


@dataclass
class TurnThinking(AgentEvent):
    thinking: str
    is_subagent: bool = False
    type = "turn_thinking"


@dataclass
class PlanReady(AgentEvent):
    plan: str
    type = "plan_ready"


@dataclass
class ToolStarted(AgentEvent):
    tool: str
    args: Any
    is_subagent: bool = False
    recovered: bool = False  # the model wrote this call as text (agent.toolcalling.toolcalls)
    type = "tool_started"


@dataclass
class ToolEvent(AgentEvent):
    tool: str
    args: Any
    result: str
    success: bool
    is_subagent: bool = False
    recovered: bool = False  # the model wrote this call as text (agent.toolcalling.toolcalls)
    type = "tool_call"


@dataclass
class TextDelta(AgentEvent):
    delta: str
    type = "stream_delta"


@dataclass
class SubagentTextDelta(TextDelta):
    """A sub-agent's answer text as it streams (shown in its spawn_agent card). A class of its
    own so the parent's deltas, one per token, carry no extra key."""

    is_subagent: bool = True


@dataclass
class StreamEnd(AgentEvent):
    content: str
    context_tokens: int = 0
    max_context_tokens: int = 0
    type = "stream_end"


@dataclass
class CitedStreamEnd(StreamEnd):
    """The end of an answer that drew on the owner's documents: `sources`, the passages it cites
    (agent.context.citations), also kept in its row's meta. A class of its own so every other
    stream_end keeps exactly its fields."""

    sources: list = field(default_factory=list)


@dataclass
class StreamStopped(AgentEvent):
    type = "stream_stopped"


@dataclass
class ContextCompressed(AgentEvent):
    messages_before: int
    messages_after: int
    type = "context_compressed"


@dataclass
class ProfileSwitched(AgentEvent):
    profile_id: str
    profile_name: str
    type = "profile_switched"


@dataclass
class SessionTitled(AgentEvent):
    """The chat got a generated title (after its first answer)."""

    title: str
    type = "session_titled"


@dataclass
class ErrorEvent(AgentEvent):
    """A run ended with an error. `code` says which kind (an LLMError's code, `context_too_large`,
    or `internal`); REST views map it to an HTTP status, nobody reads the message's words."""

    message: str
    code: str = "internal"
    type = "error"


@dataclass
class ApprovalRequired(AgentEvent):
    """A tool call waits for the owner: approve or deny (client frame `approval`, or REST)."""

    approval_id: str
    tool: str
    arguments: Any
    reason: str
    is_subagent: bool = False
    type = "approval_required"


@dataclass
class ApprovalResolved(AgentEvent):
    """decision: approve | deny | timeout | stopped; remember = "session" for "always in this chat"."""

    approval_id: str
    decision: str
    remember: str = ""
    is_subagent: bool = False
    type = "approval_resolved"


def to_frame(event: AgentEvent) -> dict[str, Any]:
    """The JSON frame for an event: its fields plus "type"."""
    # A shallow copy (not dataclasses.asdict, which deep-copies): this runs once per delta.
    return {"type": event.type, **event.__dict__}


def mark_subagent(event: AgentEvent) -> AgentEvent:
    """Sub-agent events forwarded to the parent carry is_subagent=True."""
    if hasattr(event, "is_subagent"):
        event.is_subagent = True
    return event


__all__ = [name for name in dir() if name[0].isupper()] + ["to_frame", "mark_subagent", "field"]
__all__ += ["AgentEvent", "FilePublished", "MemorySaved", "ToolProgress"]
