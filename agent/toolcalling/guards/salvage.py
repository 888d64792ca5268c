"""Slip: a small model's call cut by the token cap while a list ran on ("tasks": ["dentist", "next
Friday", "next Monday", … the clock's days again and again): the call is closed after the last
whole item, each list cut where it starts to say an item again.
"""

from __future__ import annotations

from typing import Any

from agent.toolcalling.schema import Decision, parse_decision


def salvaged(text: str, offered: set[str]) -> Decision | None:
    """A call cut while it ran on in a list ("tasks": ["dentist", "next Friday", "next Monday",
    … the clock's days again and again, to the token cap): the JSON closed after the last whole
    item of the list, and each list of strings cut where it starts to say an item again. None when
    no call of an offered tool comes out of it."""
    closers = {"{": "}", "[": "]"}
    stack: list[str] = []
    in_string = escaped = False
    last: tuple[int, list[str]] | None = None  # after the last whole string item of a list
    for i, ch in enumerate(text or ""):
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
                if stack and stack[-1] == "[":
                    last = (i + 1, list(stack))
            continue
        if ch == '"':
            in_string = True
        elif ch in closers:
            stack.append(ch)
        elif ch in "]}" and stack:
            stack.pop()
    if last is None:
        return None
    end, open_ = last
    decision = parse_decision(text[:end] + "".join(closers[c] for c in reversed(open_)), offered)
    if decision is None or decision.call is None:
        return None
    decision.call.arguments = {k: _said_once(v) for k, v in decision.call.arguments.items()}
    return decision


def _said_once(value: Any) -> Any:
    """A list of strings up to its first item said again (case and spaces aside)."""
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        return value
    seen: set[str] = set()
    for i, item in enumerate(value):
        key = " ".join(item.lower().split())
        if key in seen:
            return value[:i]
        seen.add(key)
    return value
