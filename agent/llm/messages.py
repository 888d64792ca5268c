"""The conversation as the loop sees it, independent of the database and of the backend."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class ToolCall:
    id: str
    name: str
    arguments: Any  # dict when the model sent valid JSON; the raw string otherwise
    recovered: bool = False  # written as text by the model, recovered by agent.toolcalling.toolcalls
    constrained: bool = False  # chosen in a schema-constrained step (agent.toolcalling.schema); not stored

    def as_dict(self) -> dict[str, Any]:
        data = {"id": self.id, "name": self.name, "arguments": self.arguments}
        if self.recovered:
            data["recovered"] = True
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "ToolCall":
        return cls(
            id=str(data.get("id") or ""),
            name=str(data.get("name") or ""),
            arguments=data.get("arguments"),
            recovered=bool(data.get("recovered")),
        )


@dataclass
class ChatMessage:
    role: str  # user | assistant | tool | system
    content: str = ""
    thinking: str = ""
    images: list[str] = field(default_factory=list)  # base64 (no data: prefix)
    tool_calls: list[ToolCall] = field(default_factory=list)
    tool_call_id: str = ""
    name: str = ""
    is_summary: bool = False
    db_id: int | None = None  # the Message row, when persisted
    meta: dict[str, Any] = field(default_factory=dict)  # what the live view showed (agent.toolcalling.tool_trace)


@dataclass
class LLMChunk:
    """One piece of a streamed completion."""

    content: str = ""
    thinking: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    done: bool = False
    finish_reason: str = ""
    prompt_tokens: int = 0
    completion_tokens: int = 0


@dataclass
class LLMResponse:
    content: str = ""
    thinking: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    finish_reason: str = "stop"
    prompt_tokens: int = 0
    completion_tokens: int = 0
