"""A conversation as plain text, for the one-shot LLM calls that read one (compression, memory
extraction, reflect): one format, each caller choosing its caps.

Works on anything message-shaped: `ChatMessage`s of a run's context and `Message` rows alike
(role, content, name, tool_calls, and optionally is_summary and images).
"""

from __future__ import annotations

import json
from typing import Any, Iterable


def clip(text: str, limit: int | None) -> str:
    """`text` with its whitespace collapsed, cut to `limit` characters with "…" (None: whole)."""
    if limit is None:
        return text or ""
    text = " ".join((text or "").split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def render_transcript(
    messages: Iterable[Any],
    *,
    text_chars: int | None = None,
    args_chars: int = 120,
    result_chars: int = 300,
    separator: str = "\n",
) -> str:
    """User and assistant text (cut to `text_chars` if given), tool calls as `name(arguments)`,
    tool results as short previews, an earlier summary as such; system messages are left out."""
    lines: list[str] = []
    for message in messages:
        lines.extend(_lines(message, text_chars, args_chars, result_chars))
    return separator.join(lines)


def _lines(m: Any, text_chars: int | None, args_chars: int, result_chars: int) -> list[str]:
    if getattr(m, "is_summary", False):
        return [f"Earlier summary:\n{m.content}"]
    if m.role == "user":
        images = getattr(m, "images", None) or []
        return [f"User: {clip(m.content, text_chars)}" + (f" [{len(images)} image(s)]" if images else "")]
    if m.role == "assistant":
        lines = [f"Assistant: {clip(m.content, text_chars)}"] if m.content else []
        for call in m.tool_calls or []:
            name, arguments = _call_parts(call)
            lines.append(f"Assistant called {name}({clip(arguments, args_chars)})")
        return lines
    if m.role == "tool":
        return [f"Tool result ({m.name or 'tool'}): {clip(m.content, result_chars)}"]
    return []


def _call_parts(call: Any) -> tuple[str, str]:
    """(name, arguments as text) of a ToolCall or of a stored {"name", "arguments"} dict."""
    if isinstance(call, dict):
        name, arguments = call.get("name", ""), call.get("arguments", {})
    else:
        name, arguments = call.name, call.arguments
    return name, arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
