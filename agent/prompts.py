"""Prompt text and the per-call context build (system prompt is never stored)."""

from __future__ import annotations

from typing import Awaitable, Callable

from django.conf import settings

from agent.messages import ChatMessage
from agent.models import Profile

PLANNING_PROMPT = """You are the planning step of an assistant. Decide whether the user's latest request needs a multi-step plan.

- If it can be handled directly (a simple question, small talk, a single quick action), reply with exactly: DIRECT
- Otherwise reply ONLY with a short numbered list of concrete steps, one per line, like:
1. ...
2. ...

No preamble, no explanations."""

MEMORY_HEADER = "## What I remember about the user"

# Set by memory_app at start-up: async (user_id) -> summary text or "".
memory_summary_provider: Callable[[int | None], Awaitable[str]] | None = None


def system_prompt(profile: Profile) -> str:
    """persona + '---' + profile prompt, built fresh for every call."""
    parts = [p for p in (settings.NAVI_PERSONA.strip(), profile.system_prompt.strip()) if p]
    return "\n\n---\n\n".join(parts)


async def memory_message(user_id: int | None) -> ChatMessage | None:
    if memory_summary_provider is None:
        return None
    summary = await memory_summary_provider(user_id)
    if not summary:
        return None
    return ChatMessage(role="system", content=f"{MEMORY_HEADER}\n\n{summary}")


async def build_context(profile: Profile, history: list[ChatMessage], user_id: int | None) -> list[ChatMessage]:
    messages = [ChatMessage(role="system", content=system_prompt(profile))]
    memory = await memory_message(user_id)
    if memory is not None:
        messages.append(memory)
    messages.extend(m for m in history if m.role != "system")
    return messages
