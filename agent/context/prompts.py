"""Prompt text and the per-call context build (system prompt is never stored)."""

from __future__ import annotations

import dataclasses
from datetime import datetime

from asgiref.sync import sync_to_async
from django.conf import settings

from agent.context.clock import CLOCK_START, clock_line
from agent.context.recall import facts_text
from agent.llm.messages import ChatMessage
from agent.models import Profile
from memory_app.models import MemoryFact
from memory_app.services import get_summary

# Appended to the user's message for the planning call (not a separate system prompt: the
# planning call then shares the answer call's whole prefix, and the server's prompt cache).
PLANNING_PROMPT = """[planning step] Do not answer yet. Decide whether my request above needs a multi-step plan.
- If it can be handled directly (a question, small talk, one quick action), reply with exactly: DIRECT
- Otherwise reply ONLY with 2 to 7 short numbered steps saying what you will do (e.g. which tools you will use), one per line. No preamble, no answer."""

# Appended to the user's message for the answer calls of the turn that made the plan.
PLAN_NOTE = """[the plan you made for this request before answering: carry it out and answer me; do not repeat the plan]"""

MEMORY_HEADER = "## What I remember about the user"
CLOCK_SEPARATOR = "\n\n---\n"  # between the turn's request and the clock under it

def system_prompt(profile: Profile) -> str:
    """persona + '---' + profile prompt, built fresh for every call."""
    parts = [p for p in (settings.NAVI_PERSONA.strip(), profile.system_prompt.strip()) if p]
    return "\n\n---\n\n".join(parts)


async def memory_text(user_id: int | None, summary: str | None = None) -> str:
    """The memory section of the system prompt ("" when there is nothing to remember); the
    summary is read unless it was read ahead."""
    if summary is None:
        summary = await sync_to_async(get_summary)(user_id)
    return f"{MEMORY_HEADER}\n\n{summary}" if summary else ""


async def build_context(
    profile: Profile, history: list[ChatMessage], user_id: int | None, moment: datetime | None = None,
    memory_summary: str | None = None, tools_text: str = "", clock_after: bool = False,
    recalled: list[MemoryFact] | None = None,
) -> list[ChatMessage]:
    """One system message (persona, profile, the tool catalogue of a constrained step, memory)
    + the history, and the clock at `moment`. Memory goes into that one message because some
    chat templates drop or reject a second system message; what changes least comes first, so a
    server's prompt cache keeps the longest prefix. The clock and the facts `recalled` for this
    request (agent.context.recall) change from turn to turn: with `clock_after` they are written
    under the turn's request (the last user message), so the system prompt, the tools a
    template renders after it and the history before the request are the same bytes from turn
    to turn and chat to chat; otherwise they end the system message."""
    system = system_prompt(profile)
    if tools_text:
        system = f"{system}\n\n---\n\n{tools_text}" if system else tools_text
    memory = await memory_text(user_id, memory_summary)
    if memory:
        system = f"{system}\n\n---\n\n{memory}" if system else memory
    facts = facts_text(recalled or [], memory)
    clock = clock_line(moment)
    under = f"{clock}\n\n{facts}" if facts else clock  # the clock first: `without_clock` finds it
    history = [m for m in history if m.role != "system"]
    request = max((i for i, m in enumerate(history) if m.role == "user" and not m.is_summary), default=-1)
    if clock_after and request >= 0:
        history[request] = _with_clock(history[request], under)
    else:
        system = f"{system}\n\n---\n\n{under}" if system else under
    return [ChatMessage(role="system", content=system), *history]


def without_clock(text: str) -> str:
    """A request as its writer wrote it, without the clock (and the recalled facts) `build_context`
    put under it."""
    head, sep, tail = text.rpartition(CLOCK_SEPARATOR)
    return head if sep and tail.startswith(CLOCK_START) else text


def _with_clock(message: ChatMessage, clock: str) -> ChatMessage:
    """The turn's request with the clock under it (a copy: never stored; the same row, so a
    plan anchored on the request still finds it)."""
    return dataclasses.replace(message, content=f"{message.content}{CLOCK_SEPARATOR}{clock}")
