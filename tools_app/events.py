"""The base of every server frame, and the frames a tool emits while it runs (through
tools_app.context.emit). agent.frames.events defines the rest of the protocol on this base."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class AgentEvent:
    type = ""  # class attribute, not a field: the frame's "type"


@dataclass
class MemorySaved(AgentEvent):
    category: str
    key: str
    value: str
    type = "memory_saved"


@dataclass
class ToolProgress(AgentEvent):
    """How far a running tool is (an MCP server's progress notifications): its card shows it."""

    tool: str
    progress: float
    total: float | None = None
    message: str = ""
    is_subagent: bool = False
    type = "tool_progress"


@dataclass
class FilePublished(AgentEvent):
    """A session file the agent published for inline viewing (content_publish)."""

    name: str
    url: str
    mime: str = ""
    type = "file_published"
