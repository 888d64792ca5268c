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
class FilePublished(AgentEvent):
    """A session file the agent published for inline viewing (content_publish)."""

    name: str
    url: str
    mime: str = ""
    type = "file_published"
