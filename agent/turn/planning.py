"""The optional planning step: one short call that shares the answer call's prefix, a plan
that must be a real plan, and where that plan goes (this turn only, never later turns).

The planning call is the answer call's context with the planning instruction appended to the
user's message, so a server's prefix cache (llama.cpp, Ollama) still holds the system prompt,
tools and history when the answer call comes. A plan is accepted only when it has at least two
distinct, actionable steps that are not an echo of the request; it is shown (`plan_ready`, a
display-only row) and appended to the user's message for the answer calls of this turn.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from typing import Any

from django.conf import settings

from agent.context import prompts
from agent.context.conversation import Conversation
from agent.llm import LLMBackend, LLMError, oneshot
from agent.llm.messages import ChatMessage
from agent.models import Profile
from agent.toolcalling.calls import DoesNotFit, fit_request
from agent.turn.setup import Setup
from agent.turn.stopping import Stopped, until_stopped
from tools_app.context import current_stop_event

log = logging.getLogger(__name__)

MAX_STEPS = 10
MAX_STEP_CHARS = 240
_MARKER = re.compile(r"(?:^|(?<=\s))(\d{1,2})[.)](?=\s)")
_WORD = re.compile(r"[^\W\d_]{2,}")
_ECHO_SHARE = 0.8  # a plan whose words are (almost) all the request's words is an echo


def parse_plan(text: str, request: str) -> str | None:
    """The plan as "1. step\\n2. step", or None when `text` is DIRECT or not a usable plan."""
    text = (text or "").strip()
    if not text or text.lstrip("*#_` ").upper().startswith("DIRECT"):
        return None
    markers = list(_MARKER.finditer(text))
    if len(markers) < 2 or len(markers) > MAX_STEPS:
        return None
    if [int(m.group(1)) for m in markers] != list(range(1, len(markers) + 1)):
        return None
    steps = []
    for i, marker in enumerate(markers):
        end = markers[i + 1].start() if i + 1 < len(markers) else len(text)
        step = " ".join(text[marker.end() : end].split()).strip("*_` ")
        if len(step) > MAX_STEP_CHARS or len(_WORD.findall(step)) < 2:
            return None  # a one-word "step" is not an action; a paragraph is a story
        steps.append(step)
    if len({s.lower().rstrip(".!") for s in steps}) < len(steps):
        return None
    plan_words = [w.lower() for s in steps for w in _WORD.findall(s)]
    request_words = {w.lower() for w in _WORD.findall(request)}
    if sum(w in request_words for w in plan_words) >= _ECHO_SHARE * len(plan_words):
        return None
    return "\n".join(f"{i}. {s}" for i, s in enumerate(steps, 1))


def _turn_request(context: list[ChatMessage]) -> int | None:
    """Index of the user message this turn answers (the last user message)."""
    for i in range(len(context) - 1, -1, -1):
        if context[i].role == "user" and not context[i].is_summary:
            return i
    return None


def _append_to(context: list[ChatMessage], index: int, text: str) -> list[ChatMessage]:
    out = list(context)
    out[index] = dataclasses.replace(out[index], content=f"{out[index].content}\n\n---\n{text}", db_id=None)
    return out


async def make_plan(
    backend: LLMBackend,
    profile: Profile,
    context: list[ChatMessage],
    tools: list[dict[str, Any]] | None,
) -> str | None:
    """One capped call (think off); None for DIRECT, junk, a tool call or a failure."""
    index = _turn_request(context)
    if index is None:
        return None
    request = context[index].content
    try:
        response = await oneshot.call(
            backend, _append_to(context, index, prompts.PLANNING_PROMPT), purpose="planning", tools=tools,
            model=profile.resolved_model(), temperature=0.3, max_tokens=settings.LLM_MAX_PLAN_TOKENS,
        )
    except LLMError as exc:
        log.info("planning skipped: %s", exc)
        return None
    if response.tool_calls or response.finish_reason == "length":
        return None  # it acted instead of planning, or rambled past the cap
    plan = parse_plan(response.content, request)
    if plan is None and response.content.strip().upper() != "DIRECT":
        log.info("planning: not a usable plan, answering directly: %.200r", response.content)
    return plan


async def remember_plan(conv: Conversation, plan: str) -> None:
    """Show the plan (a display-only row, so a reload shows it) and use it for this turn only."""
    index = _turn_request(conv.context)
    conv.plan = (conv.context[index] if index is not None else None, plan)
    await conv.add(ChatMessage(role="assistant", content=plan, name="plan"), context=False)


async def plan_turn(conv: Conversation, setup: Setup, context: list[ChatMessage]) -> str | None:
    """The turn's planning step: one short call on the answer call's prefix (`context`, the
    answer call's own), a validated plan or None. The plan guides this turn's answer calls only;
    it never enters later turns' context."""
    if setup.constrained:  # the tools are in the system prompt's catalogue, not the request
        schemas = None
    else:
        query, capped = conv.last_request(), len(setup.tools) > setup.profile.max_tools > 0
        try:
            meaning = await setup.meaning(setup.tools, query) if capped else None  # as the answer call ranks
        except Stopped:
            return None  # the loop reports stream_stopped
        try:  # the answer call's own selection and form of tools: one shared prefix, one cache
            schemas = fit_request(context, setup.tools, setup.profile, setup.limit, query, set(), meaning).schemas
        except DoesNotFit:
            return None  # the answer call reports it
    try:
        plan = await until_stopped(make_plan(setup.backend, setup.profile, context, schemas), current_stop_event.get())
    except Stopped:
        return None  # the loop reports stream_stopped
    if plan:
        await remember_plan(conv, plan)
    return plan


def with_plan(context: list[ChatMessage], conv: Conversation) -> list[ChatMessage]:
    """The answer call's context: the turn's plan appended to the user's message, if any."""
    anchor, plan = getattr(conv, "plan", (None, ""))
    if not plan:
        return context
    for i, msg in enumerate(context):
        if msg is anchor or (anchor.db_id is not None and msg.db_id == anchor.db_id):  # or its copy with the clock
            return _append_to(context, i, f"{prompts.PLAN_NOTE}\n{plan}")
    return context


_SEVERAL_REQUESTS = re.compile(
    r"\b(and then|after that|afterwards|then|finally|first|second|also|step)\b|\n\s*(\d+[.)]|[-*•])\s", re.I
)
AUTO_MAX_WORDS = 25


def should_plan(profile: Profile, message: str) -> bool:
    """Planning costs a whole LLM call: `auto` skips it for a short, single request."""
    mode = profile.planning_mode
    if mode == Profile.Planning.NEVER:
        return False
    if mode == Profile.Planning.ALWAYS:
        return True
    words = len(message.split())
    return words > AUTO_MAX_WORDS or message.count("?") > 1 or bool(_SEVERAL_REQUESTS.search(message))
