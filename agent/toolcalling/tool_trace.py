"""What a tool call showed in the live view besides its result, kept on its tool row
(`Message.meta`) so the history after a reload shows the same: published files, memory notes,
a profile switch, the sub-agent's own tool calls (nested under spawn_agent), and the sources a
search returned (the turn's answer cites them: agent.context.citations)."""

from __future__ import annotations

from typing import Any

from agent.frames.events import AgentEvent, FilePublished, MemorySaved, ProfileSwitched, ToolEvent
from tools_app.base import ToolResult

MAX_SUBAGENT_CALLS = 50
MAX_RESULT_CHARS = 1000


def _clip(text: str, limit: int = MAX_RESULT_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


class ToolTrace:
    def __init__(self, approval: dict[str, Any] | None = None) -> None:
        # How an approval ended (decision, who, when, why it asked): the history shows it as live.
        self._meta: dict[str, Any] = {"approval": approval} if approval else {}

    def note(self, event: AgentEvent) -> None:
        if isinstance(event, FilePublished):
            self._meta.setdefault("files", []).append({"name": event.name, "url": event.url, "mime": event.mime})
        elif isinstance(event, MemorySaved):
            self._meta.setdefault("memory", []).append(
                {"category": event.category, "key": event.key, "value": event.value}
            )
        elif isinstance(event, ProfileSwitched):
            self._meta["profile_switched"] = {"profile_id": event.profile_id, "profile_name": event.profile_name}
        elif isinstance(event, ToolEvent) and event.is_subagent:
            calls = self._meta.setdefault("subagent", [])
            if len(calls) < MAX_SUBAGENT_CALLS:
                calls.append(
                    {"tool": event.tool, "args": event.args, "result": _clip(event.result), "success": event.success}
                )
            else:
                self._meta["subagent_truncated"] = True

    def note_result(self, result: ToolResult) -> None:
        """A search's passages (knowledge_search's `sources`), for the answer's source chips."""
        sources = result.metadata.get("sources") if result.success else None
        if isinstance(sources, list) and sources:
            self._meta["sources"] = sources

    def meta(self) -> dict[str, Any]:
        return dict(self._meta)
