"""One LLM call of the loop: stream it, show and save the answer as it grows, and recover the
tool calls a model wrote as text (agent.toolcalling.toolcalls).

A stop raises Stopped and a failure raises TurnFailed (carrying its error frame); either way a
partial answer is kept as `interrupted`.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass, field
from typing import AsyncIterator

from agent.context.conversation import Conversation
from agent.context.prompts import build_context
from agent.context.window import estimate_text
from agent.frames.events import AgentEvent, ErrorEvent, TextDelta, ThinkingDelta, ThinkingEnd
from agent.llm import LLMError
from agent.llm.base import LLMContextOverflow, context_window
from agent.llm.messages import ChatMessage, ToolCall
from agent.models import Profile
from agent.toolcalling import prompts, schema
from agent.toolcalling.callfilter import CallTextFilter
from agent.toolcalling.calls import DoesNotFit, fit_request
from agent.toolcalling.toolcalls import extract_calls
from agent.turn import planning
from agent.turn.runaway import RunawayGuard
from agent.turn.setup import Setup
from agent.turn.stopping import Stopped, raise_if_stopped, stoppable
from tools_app.base import Tool
from tools_app.context import current_stop_event

log = logging.getLogger(__name__)


@dataclass
class Turn:
    """What one LLM call produced."""

    message: ChatMessage = field(default_factory=lambda: ChatMessage(role="assistant"))
    calls: list[ToolCall] = field(default_factory=list)
    tokens: int = 0
    thinking_open: bool = False  # thinking was streamed and no text has closed it yet
    decision: schema.Decision | None = None  # of a constrained step (decide_step)


class RunFailed(Exception):
    """`Agent.run` or a sub-agent got no answer; the message says why and what to do."""


class TurnFailed(Exception):
    """The LLM call failed; `event` is the error frame that ends the run."""

    def __init__(self, event: ErrorEvent) -> None:
        super().__init__(event.message)
        self.event = event


async def load_profile(profile_id: str) -> Profile:
    """The profile, or the first one when it was deleted; RunFailed when none exist."""
    profile = await Profile.objects.filter(pk=profile_id).afirst()
    if profile is None:
        profile = await Profile.objects.order_by("id").afirst()
    if profile is None:
        raise RunFailed("no agent profiles exist; run `python manage.py migrate` to create the defaults")
    return profile


async def turn_context(conv: Conversation, setup: Setup) -> list[ChatMessage]:
    """What one call of the turn reads: system prompt (with the tool catalogue of constrained
    steps), history, and the turn's plan."""
    # A profile that caps its tools (a small model's) sends each step's tools anyway, and copies
    # what is written under its request: its clock stays in the system message.
    context = await build_context(
        setup.profile, conv.context, conv.owner_id, conv.clock, conv.take_memory(), tools_text=setup.catalogue,
        clock_after=not setup.profile.max_tools, recalled=await conv.recalled_facts(),
    )
    return planning.with_plan(context, conv)


async def stream_turn(
    conv: Conversation, setup: Setup, offer: list[Tool], turn: Turn, query: str, *,
    answer_only: bool = False, recover: bool = True, step: bool = False,
) -> AsyncIterator[AgentEvent]:
    """Stream one call into `turn`, yielding thinking and text deltas, and save the answer.
    `step`: a constrained step's free call, with the step's tools (agent.toolcalling.schema).
    `answer_only`: only an answer, no tools sent (with the catalogue, a note says so; no note
    otherwise: a small model copies it into its answer). At most one call it writes anyway is
    recovered, none when `recover` is off."""
    profile = setup.profile
    context = await turn_context(conv, setup)
    if answer_only and setup.catalogue:
        context = prompts.with_note(context, prompts.answer_note(context))
    if step or answer_only:  # the deciding call's prefix (its tools too): the server's cache serves it
        request = fit_step(context, setup.step_tools, setup)
        readable = setup.step_tools or offer
    else:
        capped = len(offer) > profile.max_tools > 0  # a small model's profile choosing its few: by meaning too
        meaning = await setup.meaning(offer, query) if capped else None
        try:
            request = fit_request(context, offer, profile, setup.limit, query, setup.tracker.used, meaning)
        except DoesNotFit as exc:
            raise TurnFailed(ErrorEvent(str(exc), code="context_too_large")) from None
        readable = request.tools
    names = {t.name: frozenset((t.parameters or {}).get("properties") or ()) for t in readable}
    text_filter = CallTextFilter(names) if profile.recover_tool_calls and names and recover else None
    stream = setup.backend.stream_complete(
        context, request.schemas, model=profile.resolved_model(), temperature=profile.temperature,
        max_tokens=profile.answer_token_limit(),
    )
    async for event in streamed(stream, conv, setup, turn, text_filter):
        yield event
    if text_filter is not None and (rest := _recover_calls(text_filter, turn, names)):
        yield TextDelta(rest)
    if not turn.tokens:  # the server reported no usage: count locally
        turn.tokens = request.prompt_tokens + estimate_text(turn.message.content + turn.message.thinking)
    if answer_only:  # after a step that chose to answer, a list of written calls is a small model rambling
        turn.calls = turn.calls[:1] if recover else []
    if turn.thinking_open and not turn.calls:
        yield ThinkingEnd()
    turn.message.tool_calls = list(turn.calls)
    await conv.save_streaming(turn.message, tokens=turn.tokens)  # the context's size with it: one hop


def fit_step(context: list[ChatMessage], tools: list[Tool], setup: Setup):
    """A constrained step's request: with the catalogue in the system prompt no tools are sent;
    otherwise the step's tools go as the chat template shows them (what a small model was
    trained on; their schemas are also the step's grammar)."""
    try:
        return fit_request(context, [] if setup.catalogue else tools, setup.profile, setup.limit, "", set(t.name for t in tools))
    except DoesNotFit as exc:
        raise TurnFailed(ErrorEvent(str(exc), code="context_too_large")) from None


async def streamed(stream, conv: Conversation, setup: Setup, turn: Turn, text_filter: CallTextFilter | None):
    """The call's deltas into `turn`; a stop or failure keeps the partial answer as interrupted
    and raises Stopped or TurnFailed; the HTTP response is closed either way."""
    try:
        async for event in _receive(stream, conv, turn, text_filter):
            yield event
    except (Stopped, LLMError, Exception) as exc:
        await keep_interrupted(conv, turn.message)
        raise await failure(exc, conv, setup, turn) from None
    finally:
        with contextlib.suppress(Exception):
            await stream.aclose()


async def _receive(stream, conv: Conversation, turn: Turn, text_filter: CallTextFilter | None):
    stop = current_stop_event.get()
    msg = turn.message
    guard = RunawayGuard()
    async for chunk in stoppable(stream, stop):
        raise_if_stopped(stop)
        if chunk.thinking:
            msg.thinking += chunk.thinking
            turn.thinking_open = True
            yield ThinkingDelta(chunk.thinking)
        shown = text_filter.feed(chunk.content) if text_filter and chunk.content else chunk.content
        if shown:
            for event in show(turn, shown):
                yield event
            if guard.looping(msg.content):
                await cut_loop(conv, msg, guard)
                return  # the stream is closed by the caller: the model stops writing
        turn.calls.extend(chunk.tool_calls)
        if chunk.done:
            turn.tokens = chunk.prompt_tokens + chunk.completion_tokens
        if chunk.content or chunk.thinking:
            await conv.save_streaming(msg, status="partial", force=False)
        if text_filter is not None and text_filter.enough:
            return  # a call found, then only talk: the call runs now (the stream is closed)


def show(turn: Turn, text: str) -> list[AgentEvent]:
    """Text of the answer, added to it: the events that show it (the thinking closed first)."""
    turn.message.content += text
    events: list[AgentEvent] = [ThinkingEnd()] if turn.thinking_open else []
    turn.thinking_open = False
    return [*events, TextDelta(text)]


async def cut_loop(conv: Conversation, msg: ChatMessage, guard: RunawayGuard) -> None:
    """The answer ended in a loop: it keeps the loop said once (stream_end's content replaces
    what the page showed)."""
    log.info("answer cut: it repeated itself (%d characters kept of %d)", len(guard.cut or ""), len(msg.content))
    msg.content = guard.cut or ""
    msg.meta = {**(msg.meta or {}), "cut": "repetition"}
    await conv.save_streaming(msg, status="partial", force=True)
    if msg.db_id is not None:
        await conv.save_meta(msg)


async def keep_interrupted(conv: Conversation, msg: ChatMessage) -> None:
    if msg.content or msg.thinking:
        await conv.save_streaming(msg, status="interrupted")


async def failure(exc: Exception, conv: Conversation, setup: Setup, turn: Turn) -> Exception:
    """What a broken stream raises on: Stopped as is, anything else as TurnFailed."""
    if isinstance(exc, Stopped):
        return exc
    if not isinstance(exc, LLMError):  # anything unexpected must still end the turn cleanly
        log.error("LLM stream failed", exc_info=exc)
        message = f"the model call failed unexpectedly: {type(exc).__name__}: {exc}"
        return TurnFailed(ErrorEvent(message, code="internal"))
    message = str(exc)
    if exc.mid_answer and (turn.message.content or turn.message.thinking):
        message += "; the partial answer was kept — send the message again to retry"
    if isinstance(exc, LLMContextOverflow):
        # The next turn's pre-turn compression sees the context as full and shrinks it.
        window = context_window(setup.backend.name, setup.profile.resolved_model())
        await conv.set_token_count(max(exc.prompt_tokens, window))
    return TurnFailed(ErrorEvent(message, code=exc.code))


def _recover_calls(text_filter: CallTextFilter, turn: Turn, names: dict[str, frozenset[str]]) -> str:
    """Text held back by the filter that is not a call (returned, to show), and the calls
    written as text, which become the turn's calls when the model made no native call."""
    msg = turn.message
    rest, recovered = text_filter.finish()
    msg.content += rest
    if turn.calls:
        return rest
    if not recovered:  # a call in mid-line was already shown: keep it out of the saved answer
        found = extract_calls(msg.content, names)
        recovered, msg.content = (found.calls, found.text) if found.calls else ([], msg.content)
    turn.calls = list(recovered)
    return rest
