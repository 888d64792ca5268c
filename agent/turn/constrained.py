"""The constrained step (agent.toolcalling.schema): on a server that enforces schemas the model
chooses "answer" or one valid call; the answer then streams unconstrained, or, for a small
model's profile after its tools ran, from a short prompt of the request and the results.
"""

from __future__ import annotations

import contextlib
import logging
from typing import AsyncIterator

from agent.context.conversation import Conversation
from agent.context.window import estimate_text
from agent.frames.events import AgentEvent, ThinkingDelta, ThinkingEnd
from agent.llm import LLMError
from agent.llm.base import (
    LLMContextOverflow,
    LLMIncomplete,
    LLMModelMissing,
    LLMTimeout,
    LLMUnreachable,
    OutputSchema,
)
from agent.llm.messages import ChatMessage, ToolCall
from agent.toolcalling import offering, plan, progress, prompts, schema
from agent.toolcalling.guards import ledger, paths, plain, refusals, salvage, values
from agent.toolcalling.guards.refusals import unless_refusal
from agent.toolcalling.partial_json import FieldText
from agent.turn.repairs import (
    compute_first,
    keep_as_said,
    keep_with_found,
    read_first,
    read_named_first,
    write_code,
    write_text,
    written_as,
)
from agent.turn.runaway import RunawayGuard
from agent.turn.setup import Setup
from agent.turn.stopping import Stopped, raise_if_stopped, stoppable
from agent.turn.turns import (
    Turn,
    cut_loop,
    failure,
    fit_step,
    keep_interrupted,
    show,
    stream_turn,
    streamed,
    turn_context,
)
from navi_project.llm_purpose import llm_purpose
from tools_app.base import Tool
from tools_app.context import current_stop_event
from tools_app.registry import ToolRegistry

log = logging.getLogger(__name__)


async def constrained_step(
    conv: Conversation, setup: Setup, offer: list[Tool], turn: Turn, query: str, tools: ToolRegistry
) -> AsyncIterator[AgentEvent]:
    """One step on a server that enforces schemas (agent.toolcalling.schema): the model chooses
    "answer" or one valid call under the step's schema. The answer then streams
    unconstrained: on a profile that caps its tools (a small model's), after tool results,
    from a short prompt of the request and the results (a small model asked in the long
    context writes the call again, or copies the instruction); otherwise in the step's own
    context. A call written in that answer anyway is written again under its schema when
    it is not valid: what runs is never malformed. A small model's plain question (nothing for
    a tool to do: guards.plain) is answered at once, in one call with no tools."""
    if "plain" in setup.guards and not setup.tracker.used and plain.asks_nothing(query, conv.context, offer):
        ledger.fired("plain")
        setup.step_tools = []
        async for event in stream_turn(conv, setup, offer, turn, query, answer_only=True, recover=False):
            yield event
        return
    async for event in decide_step(conv, setup, offer, turn, query):
        yield event  # an answer written in the step itself: the turn's one call
    decision = turn.decision
    if decision is not None and (decision.call is not None or decision.text):
        return
    if decision is not None and setup.profile.max_tools and setup.tracker.used:
        async for event in answer_from_results(conv, setup, turn):
            yield event
        return
    async for event in stream_turn(conv, setup, offer, turn, query, answer_only=decision is not None,
                                   recover=not (decision and decision.repeated)):
        yield event
    if not turn.calls:
        return
    call = turn.calls[0]
    names = [t.name for t in setup.step_tools]
    if call.name not in names or tools.prepare(call.name, call.arguments, repair=setup.profile.repair_arguments,
                                               offered=names).problem is not None:
        rewritten = await rewrite_call(conv, setup, turn, call)
        if rewritten is not None and rewritten.call is not None:
            call = rewritten.call
    if turn.calls != [call]:
        turn.calls = [call]
        turn.message.tool_calls = [call]
        await conv.save_streaming(turn.message, tokens=turn.tokens)


MAX_LEFT_ASKS = 2  # per turn: a small model asked again about a part of its request left

# Failures of a deciding call that end the turn; any other error falls back to an unconstrained call.
_FATAL = (LLMUnreachable, LLMModelMissing, LLMTimeout, LLMContextOverflow)


async def rewrite_call(conv: Conversation, setup: Setup, turn: Turn, call: ToolCall) -> schema.Decision | None:
    """A call that came out malformed, written again under the step's schema: that tool's
    arguments (or, for a name that is no tool of the step, any of the step's tools). The prefix
    is the free call's, so the server's cache serves it; None when nothing usable came back."""
    tools = setup.step_tools
    known = [t for t in tools if t.name == call.name]
    wanted = known or tools
    context = [m for m in await turn_context(conv, setup) if m is not turn.message]
    context = prompts.with_note(context, prompts.redo_note(call.name, bool(known)))
    return await _constrained_call(conv, setup, turn, context, tools, wanted, answer=False)


async def decide_step(
    conv: Conversation, setup: Setup, offer: list[Tool], turn: Turn, query: str
) -> AsyncIterator[AgentEvent]:
    """The constrained step: the model picks "answer" or one offered tool with valid arguments
    (the profile's `max_tools` most relevant to the request), left in `turn.decision`. A call is
    saved as the assistant's tool-call message. At a turn's first step of a profile that does
    not cap its tools the answer may be written in the step itself: its text is streamed as it
    grows and saved, and the turn needs no second call (a message that needs no tool is one
    call). None when the step gave nothing usable (the caller then makes an unconstrained call)."""
    cap = setup.profile.max_tools
    # Only a capped step asks for meaning (an embedding call, raced against Stop); uncapped, the
    # race's two tasks were two trips through the event loop before every request.
    if cap:
        offer = offering.without_invented_addresses([t for t in offer if t.usable()], offering.said_and_found(conv.context))
    meaning = await setup.meaning(offer, query) if cap > 0 else None
    if cap and setup.tracker.plan is None:
        setup.tracker.plan = plan.make(query, offer, meaning)
    if cap and "done" in setup.guards and setup.tracker.plan is not None and setup.tracker.plan.served(query, setup.tracker.done):
        ledger.fired("done")  # the one call the request asked for worked: it is answered
        turn.decision = schema.Decision(answer=True)
        return
    step = setup.tracker.plan.next(setup.tracker.done) if cap and setup.tracker.plan else None
    forced = [t for t in step[1].tools if t in offer] if step is not None and step[1].tries < plan.MAX_TRIES else []
    offer = forced or offering.choose(offer, query, cap, setup.tracker.used, meaning)
    # "Use the reverse_text tool to …": the first step of such a request is a call, not an answer;
    # so is a part of a planned request that names what does it.
    told = bool(forced) or (not setup.tracker.used and offering.names_a_tool(query, offer))
    text = not told and not setup.tracker.used and not setup.profile.max_tools
    context = await turn_context(conv, setup)
    if forced and not setup.tracker.plan.single:
        step[1].tries += 1
        context = prompts.with_note(context, setup.tracker.plan.note(step[0]))
    else:
        # A plain first call (a plan of one step) is asked as any step is, its tool the only one:
        # told "Call tool_manual for my request now: {…}", the 0.5B model wrote that into `name`.
        if forced:
            step[1].tries += 1
        context = prompts.with_note(context, prompts.decide_note(context, offer, text))
    setup.step_tools = offer
    async for event in _constrained_stream(conv, setup, turn, context, offer, offer, answer=not told, text=text):
        yield event
    decision = turn.decision
    if decision is None or decision.text:
        return
    repeated = _again(setup, decision)
    # A small model that answers at once is asked once more too when a part is plainly left: a
    # file the request names ("Create a file config.json …"), or a part its words and meaning
    # give a tool ("Write 'server is up' into the scratchpad section named status").
    stopping = decision.answer
    if (repeated or stopping) and "left" in setup.guards and setup.tracker.left_asks < MAX_LEFT_ASKS:
        # A small model that goes round (a call it already made) or answers after its first
        # step often has a part of the request left (read timesheet.csv, then write
        # hours_total.txt): asked once more, told what is left, without the repeated call.
        left = progress.what_is_left(query, setup.tracker.done, offer, setup.tracker.used, meaning)
        if left:
            ledger.fired("left")
            setup.tracker.left_asks += 1
            if repeated:
                setup.tracker.count_repeat()
            decision = await _decide_what_is_left(conv, setup, turn, offer, decision.call, left, query) or decision
    if _again(setup, decision):
        # The same successful call again: a model with nothing new to do. It answers.
        setup.tracker.count_repeat()
        turn.decision = schema.Decision(answer=True, repeated=True)
        return
    if decision.call is not None:
        decision.call = await _repaired(conv, setup, decision.call, query, step[1].part if forced else None)
        turn.calls = [decision.call]
        turn.message.tool_calls = [decision.call]
        await conv.save_streaming(turn.message, tokens=turn.tokens)
    turn.decision = decision


def _again(setup: Setup, decision: schema.Decision) -> bool:
    """Whether the decision is a call this turn already made with success; a call whose program
    was written again is compared as rewritten."""
    call = decision.call
    if call is None:
        return False
    if (known := setup.rewritten.get(written_as(call))) is not None:
        call.arguments = dict(known)
    return setup.tracker.succeeded(call)


async def _repaired(conv: Conversation, setup: Setup, call: ToolCall, query: str, part: str | None) -> ToolCall:
    """The step's call after the repairs of its groups that are on (none for a big model's
    profile: agent.toolcalling.guards.ledger); `part`: the planned step's part, when forced."""
    on = setup.guards
    if "paths" in on:
        fixed = part is not None and paths.fix_path_for_part(call, query, part, setup.tracker.done)
        if paths.fix_path(call, query) or fixed:
            ledger.fired("paths")
    if "programs" in on:
        await write_code(conv, setup, call, part)
    if "reads" in on:
        call = await read_first(setup, call, query)
        call = await read_named_first(setup, call, query)
    if on & {"texts", "notes"}:
        await write_text(conv, setup, call)
    if "notes" in on:
        await keep_with_found(conv, setup, call, part)
    if "facts" in on:
        await keep_as_said(conv, setup, call)
    if "values" in on:
        call = await compute_first(conv, setup, call)
    return call


async def _decide_what_is_left(
    conv: Conversation, setup: Setup, turn: Turn, offer: list[Tool], repeated: ToolCall | None, left, query: str
) -> schema.Decision | None:
    """The step asked again: told what is left, and offered the tools the request names that did
    not run (or, with a file left, the step's tools), without a repeated call's action or tool."""
    tool = next((t for t in offer if repeated is not None and t.name == repeated.name), None)
    key = getattr(tool, "action_parameter", "action")
    action = repeated.arguments.get(key) if repeated is not None and isinstance(repeated.arguments, dict) else None
    if left.files or left.to_change:
        tools = [t for t in offer if repeated is None or t.name != repeated.name or (action and getattr(t, "actions", {}))]
    else:
        tools = left.tools
    if not tools:
        return None
    context = await turn_context(conv, setup)
    context = prompts.with_note(context, prompts.left_note(left, query))
    without = (repeated.name, action) if repeated is not None and action else None
    return await _constrained_call(conv, setup, turn, context, tools, tools, answer=True, without=without)


async def _constrained_call(
    conv: Conversation, setup: Setup, turn: Turn, context: list[ChatMessage], tools: list[Tool], allowed: list[Tool],
    *, answer: bool, without: tuple[str, str] | None = None,
) -> schema.Decision | None:
    """One call under the schema of `allowed` (and "answer" with `answer`), the step's `tools`
    sent as the template shows them; None when it gave nothing usable."""
    async for _ in _constrained_stream(conv, setup, turn, context, tools, allowed, answer=answer, without=without):
        pass
    return turn.decision


async def _constrained_stream(
    conv: Conversation, setup: Setup, turn: Turn, context: list[ChatMessage], tools: list[Tool], allowed: list[Tool],
    *, answer: bool, without: tuple[str, str] | None = None, text: bool = False,
) -> AsyncIterator[AgentEvent]:
    """`_constrained_call` as a stream: with `text`, an answer written in the step is shown
    (TextDelta) as the JSON grows, and saved; the decision is left in `turn.decision`."""
    profile = setup.profile
    turn.decision = None
    request = fit_step(context, tools, setup)
    known = tuple(t.name for t in setup.tools)
    output = OutputSchema(setup.constrained, schema.step_schema(
        allowed, answer=answer, without=without, text=text, known=known,
        request=conv.last_request() if profile.max_tools else None))
    reader = FieldText(schema.ANSWER_TEXT) if text else None
    guard, raw_guard = RunawayGuard(), RunawayGuard()  # the answer's text; the JSON of a call
    msg, stop = turn.message, current_stop_event.get()
    parts: list[str] = []
    written = 0  # characters in parts
    calls: list[ToolCall] = []
    finish = ""
    # The step of a profile that lists every tool reasons as any call does (OLLAMA_THINK): its
    # thinking is the turn's, shown as it comes. A small model's capped steps never think.
    think = False if profile.max_tools else None
    with llm_purpose("decide"):
        stream = setup.backend.stream_complete(
            context, request.schemas, model=profile.resolved_model(), temperature=profile.temperature,
            think=think, max_tokens=profile.answer_token_limit(), output=output,
        )
        try:
            async for chunk in stoppable(stream, stop):
                raise_if_stopped(stop)
                if chunk.thinking:
                    msg.thinking += chunk.thinking
                    turn.thinking_open = True
                    yield ThinkingDelta(chunk.thinking)  # not saved yet: the answer call reads the context
                if chunk.content:
                    parts.append(chunk.content)
                    written += len(chunk.content)
                    if reader is not None and (shown := reader.feed(chunk.content)):
                        for event in show(turn, shown):
                            yield event
                        if guard.looping(msg.content):
                            await cut_loop(conv, msg, guard)
                            break  # the answer is what was said before the loop; the call is closed
                        await conv.save_streaming(msg, status="partial", force=False)
                    elif not msg.content and raw_guard.due(written) and raw_guard.looping("".join(parts)):
                        # A call whose arguments repeat themselves (a 0.5B model wrote one until the
                        # token cap: 20 minutes on a CPU): cut, nothing usable, the free call decides.
                        log.info("a constrained call ran away in its arguments: cut at %d characters", written)
                        finish = "length"
                        break
                calls.extend(chunk.tool_calls)
                if chunk.done:
                    finish = chunk.finish_reason or "stop"
                    turn.tokens = chunk.prompt_tokens + chunk.completion_tokens
        except Stopped:
            await keep_interrupted(conv, msg)
            raise
        except _FATAL as exc:
            await keep_interrupted(conv, msg)
            raise await failure(exc, conv, setup, turn) from None
        except (LLMError, LLMIncomplete) as exc:  # e.g. a schema the server could not turn into a grammar
            if msg.content:  # the owner saw the start of an answer: the turn failed
                await keep_interrupted(conv, msg)
                raise await failure(exc, conv, setup, turn) from None
            log.info("constrained call failed, going on without it: %s", exc)
            return
        finally:
            with contextlib.suppress(Exception):
                await stream.aclose()
    offered = {t.name for t in allowed}
    native = [c for c in calls if c.name in offered and isinstance(c.arguments, dict)]
    if not turn.tokens:
        turn.tokens = request.prompt_tokens + estimate_text("".join(parts))
    if native:  # the server read the JSON as a call of its own
        turn.decision = schema.Decision(call=ToolCall(id=native[0].id, name=native[0].name,
                                                           arguments=native[0].arguments, constrained=True))
        return
    if msg.content:  # the answer, written in the step (cut by the token cap, it is still what was said)
        turn.decision = schema.Decision(answer=True, text=msg.content)
        await conv.save_streaming(msg, tokens=turn.tokens)
        return
    content = "".join(parts)
    # Cut (it ran on, or hit the token cap): a call whose list ran on keeps its items said once.
    turn.decision = schema.parse_decision(content, offered)
    if finish == "length" and "salvage" in setup.guards:
        saved = salvage.salvaged(content, offered)
        if saved is not None and (turn.decision is None or turn.decision.call is None
                                  or turn.decision.call.arguments != saved.call.arguments):
            ledger.fired("salvage")
        turn.decision = saved
    if turn.decision is None:
        log.info("constrained call gave nothing usable: %.200r", content)


async def answer_from_results(conv: Conversation, setup: Setup, turn: Turn) -> AsyncIterator[AgentEvent]:
    """The answer of a small model's turn after its tools ran: the request and this turn's
    results in a short prompt of their own, streamed and saved as the turn's answer; a program's
    short output that the answer leaves out is shown under it (values.unstated_output)."""
    profile = setup.profile

    def stream(temperature: float, again: bool = False):
        return setup.backend.stream_complete(
            prompts.results_prompt(conv.context, again), None, model=profile.resolved_model(),
            temperature=temperature, max_tokens=profile.answer_token_limit(),
        )

    said = refusals.results_said(conv.context)
    chunks = unless_refusal(stream, profile.temperature, said) if "refusals" in setup.guards else stream(profile.temperature)
    async for event in streamed(chunks, conv, setup, turn, None):
        yield event
    runners = {t.name for t in setup.tools if getattr(t, "code_runs_as_is", False)}
    if "values" in setup.guards and (output := values.unstated_output(conv.context, turn.message.content, runners)):
        ledger.fired("values")
        for event in show(turn, values.output_note(output)):
            yield event
    turn.tokens = conv.token_count + estimate_text(turn.message.content)  # the chat's context, not this prompt
    if turn.thinking_open:
        yield ThinkingEnd()
    await conv.save_streaming(turn.message, tokens=turn.tokens)
