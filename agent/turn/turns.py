"""One LLM call of the loop: stream it, show and save the answer as it grows, and recover the
tool calls a model wrote as text (agent.toolcalling.toolcalls).

A stop raises Stopped and a failure raises TurnFailed (carrying its error frame); either way a
partial answer is kept as `interrupted`.
"""

from __future__ import annotations

import contextlib
import json
import logging
from dataclasses import dataclass, field
from typing import AsyncIterator

from agent.context.conversation import Conversation
from agent.context.prompts import build_context
from agent.context.window import effective_window, estimate_text
from agent.frames.events import AgentEvent, ErrorEvent, TextDelta, ThinkingDelta, ThinkingEnd
from agent.llm import LLMBackend, LLMError
from agent.llm.base import (
    LLMContextOverflow,
    LLMIncomplete,
    LLMModelMissing,
    LLMTimeout,
    LLMUnreachable,
    OutputSchema,
    context_window,
)
from agent.llm.messages import ChatMessage, LLMChunk, ToolCall
from agent.models import Profile
from agent.toolcalling import offering, plan, progress, prompts, schema, support, toolmeaning, toolselect
from agent.toolcalling.callfilter import CallTextFilter
from agent.toolcalling.calls import CallTracker, DoesNotFit, fit_request
from agent.toolcalling.guards import notes, paths, programs, refusals, salvage, texts, values
from agent.toolcalling.partial_json import FieldText
from agent.toolcalling.toolcalls import extract_calls
from agent.turn import planning
from agent.turn.runaway import RunawayGuard
from agent.turn.stopping import Stopped, raise_if_stopped, stoppable, until_stopped
from navi_project.llm_purpose import llm_purpose
from tools_app.base import Tool
from tools_app.context import current_stop_event
from tools_app.registry import ToolRegistry

log = logging.getLogger(__name__)


@dataclass
class Setup:
    """What the loop uses of the profile in force (switch_profile may change it mid-run)."""

    profile: Profile
    backend: LLMBackend
    tools: list[Tool]
    limit: int  # the context window
    tracker: CallTracker
    constrained: str = ""  # how the server takes a schema when steps are constrained (agent.toolcalling.support)
    catalogue: str = ""  # the tools as the system prompt lists them for constrained steps (all tools offered)
    step_tools: list = field(default_factory=list)  # the tools of the last constrained step, sent as the template shows them
    # A call as the model wrote it → its arguments with the program written again (_write_code):
    # the same call chosen again is then seen as the repeat it is, and costs no second rewrite.
    rewritten: dict[str, dict] = field(default_factory=dict)
    meanings: dict[tuple, toolmeaning.Meaning | None] = field(default_factory=dict)

    async def meaning(self, tools: list, query: str) -> toolmeaning.Meaning | None:
        """How close the request is to `tools` in meaning (offering.meaning: a capped profile
        only), asked once per turn and set of tools: the planning call and the answer call of a
        turn offer the same tools (one prompt prefix for the server's cache) even when the tools'
        vectors were finished between them; a stop ends the wait."""
        key = (query, tuple(t.name for t in tools))
        if key not in self.meanings:
            cap = self.profile.max_tools
            self.meanings[key] = await until_stopped(offering.meaning(tools, query, cap), current_stop_event.get()) if cap > 0 else None
        return self.meanings[key]


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


CATALOGUE_SHARE = 4  # the catalogue takes at most this fraction of the window


async def load_profile(profile_id: str) -> Profile:
    """The profile, or the first one when it was deleted; RunFailed when none exist."""
    profile = await Profile.objects.filter(pk=profile_id).afirst()
    if profile is None:
        profile = await Profile.objects.order_by("id").afirst()
    if profile is None:
        raise RunFailed("no agent profiles exist; run `python manage.py migrate` to create the defaults")
    return profile


async def make_setup(profile: Profile, backend: LLMBackend, tools: list[Tool], limit: int = 0) -> Setup:
    """What the turn's calls use of `profile` offering `tools`: the window, a call tracker, and
    how the server takes a schema when the steps are constrained (probed once per server and model)."""
    limit = limit or await effective_window(backend, profile)
    model = profile.resolved_model()
    setup = Setup(profile, backend, tools, limit, CallTracker(backend.name, model))
    if tools and profile.tool_calling != Profile.ToolCalling.NATIVE:
        setup.constrained = support.known_way(backend, model)  # probed once per server and model
        if setup.constrained is None:
            setup.constrained = await until_stopped(support.support(backend, model), current_stop_event.get())
        if not setup.constrained and profile.tool_calling == Profile.ToolCalling.CONSTRAINED:
            log.warning("profile %s asks for constrained tool calls, but %s/%s enforces no JSON schema: "
                        "tool calls are read from text", profile.id, backend.name, model)
        # Every tool offered: one catalogue in the system prompt, the same in every chat (a
        # cached prefix). A profile that caps its tools (a small model's) sends each step's
        # few tools the way the chat template shows them instead.
        setup.catalogue = prompts.catalogue(tools) if setup.constrained and not profile.max_tools else ""
        if estimate_text(setup.catalogue) > limit // CATALOGUE_SHARE:
            # A small window: the catalogue would crowd the chat out of it (a 1500-token window
            # could not take "hi"). The step's tools go as fit_request cuts them down instead.
            setup.catalogue = ""
    return setup


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
        request = _fit_step(context, setup.step_tools, setup)
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
    async for event in _streamed(stream, conv, setup, turn, text_filter):
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


async def constrained_step(
    conv: Conversation, setup: Setup, offer: list[Tool], turn: Turn, query: str, tools: ToolRegistry
) -> AsyncIterator[AgentEvent]:
    """One step on a server that enforces schemas (agent.toolcalling.schema): the model chooses
    "answer" or one valid call under the step's schema. The answer then streams
    unconstrained: on a profile that caps its tools (a small model's), after tool results,
    from a short prompt of the request and the results (a small model asked in the long
    context writes the call again, or copies the instruction); otherwise in the step's own
    context. A call written in that answer anyway is written again under its schema when
    it is not valid: what runs is never malformed."""
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


STRAYS = 2  # failed calls of other tools after a call did the request: the turn is answered
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
    if cap and not (setup.tracker.plan and not setup.tracker.plan.single) and setup.tracker.strays >= STRAYS:
        # A request that a call already did ("fetch <url> and tell me how many widgets are in
        # stock"), then other tools tried and failed (reading a stock.json that is no file):
        # Qwen2.5-Coder-0.5B went on trying and answered about the failures. The results it has
        # answer it. (A planned request's parts are its own: the plan forces and checks them.)
        setup.tracker.wandered = True
        turn.decision = schema.Decision(answer=True)
        return
    # Only a capped step asks for meaning (an embedding call, raced against Stop); uncapped, the
    # race's two tasks were two trips through the event loop before every request.
    if cap:
        offer = offering.without_invented_addresses([t for t in offer if t.usable()], offering.said_and_found(conv.context))
    meaning = await setup.meaning(offer, query) if cap > 0 else None
    if cap and setup.tracker.plan is None:
        setup.tracker.plan = plan.make(query, offer, meaning)
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
    if (repeated or stopping) and setup.profile.max_tools and setup.tracker.left_asks < MAX_LEFT_ASKS:
        # A small model that goes round (a call it already made) or answers after its first
        # step often has a part of the request left (read timesheet.csv, then write
        # hours_total.txt): asked once more, told what is left, without the repeated call.
        left = progress.what_is_left(query, setup.tracker.done, offer, setup.tracker.used, meaning)
        if left:
            setup.tracker.left_asks += 1
            if repeated:
                setup.tracker.count_repeat()
            decision = await _decide_what_is_left(conv, setup, turn, offer, decision.call, left, query) or decision
    if _again(setup, decision):
        # The same successful call again, or (a small model's profile) writing over what this
        # turn already wrote: a small model with nothing new to do. It answers.
        setup.tracker.count_repeat()
        turn.decision = schema.Decision(answer=True, repeated=True)
        return
    if decision.call is not None:
        if setup.profile.max_tools:
            if forced:
                paths.fix_path_for_part(decision.call, query, step[1].part, setup.tracker.done)
            paths.fix_path(decision.call, query)
            await _write_code(conv, setup, decision.call)
            decision.call = await _read_first(setup, decision.call, query)
            decision.call = await _read_named_first(setup, decision.call, query)
            await _write_text(conv, setup, decision.call)
            decision.call = await _compute_first(conv, setup, decision.call)
        turn.calls = [decision.call]
        turn.message.tool_calls = [decision.call]
        await conv.save_streaming(turn.message, tokens=turn.tokens)
    turn.decision = decision


def _again(setup: Setup, decision: schema.Decision) -> bool:
    """The decision is a call this turn already made (or, for a small model, one writing over
    what the turn wrote, or one that failed before a call that has worked since); a call whose
    program was written again is compared as rewritten."""
    call = decision.call
    if call is None:
        return False
    if (known := setup.rewritten.get(_written_as(call))) is not None:
        call.arguments = dict(known)
    return setup.tracker.succeeded(call) or bool(setup.profile.max_tools and (
        setup.tracker.replaces_again(call) or setup.tracker.failed_before_a_success(call)))


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


async def _write_code(conv: Conversation, setup: Setup, call: ToolCall) -> None:
    """`_write_program`, then what the program plainly forgot put in (programs.completed_program:
    a standard module never imported, a lone function never called) and the end of a span the
    request said with both ends (programs.inclusive_ranges: "1 to 12345" is range(1, 12346))."""
    written_as = _written_as(call)  # as the model wrote it: how a repeat of it is recognised
    await _write_program(conv, setup, call)
    tool = next((t for t in setup.step_tools if t.name == call.name), None)
    argument = getattr(tool, "code_argument", "")
    if argument and isinstance(call.arguments.get(argument), str):
        completed = programs.completed_program(call.arguments[argument])
        completed = programs.inclusive_ranges(completed, conv.last_request())
        if completed != call.arguments[argument]:
            call.arguments = {**call.arguments, argument: completed}
            setup.rewritten[written_as] = dict(call.arguments)


async def _write_program(conv: Conversation, setup: Setup, call: ToolCall) -> None:
    """A small model's program argument (Tool.code_argument), written again as plain code in a
    short call of its own: inside a JSON string a coder model writes `1 + 12345` for "the sum
    from 1 to 12345"; asked for code, it writes the program. The model's own version stays when
    this one gives no Python that parses, or reads a file or path nobody named, and is not asked
    for when it is one expression that computes from builtins alone (programs.computes_itself)."""
    tool = next((t for t in setup.step_tools if t.name == call.name), None)
    argument = getattr(tool, "code_argument", "")
    if not argument or not isinstance(call.arguments.get(argument, ""), str):
        return
    if getattr(tool, "code_runs_as_is", False) and programs.computes_itself(call.arguments[argument]):
        return
    try:
        brief = tool.code_brief.format(**{k: v for k, v in call.arguments.items() if isinstance(v, str)})
    except (KeyError, IndexError, ValueError):
        brief = tool.code_brief
    own, said = call.arguments.get(argument, ""), programs.turn_said(conv.context)
    code = await _program(conv, setup, call, brief)
    if code and programs.invents_numbers(code, f"{said}\n{own}"):
        # Asked for the sum from 1 to 12345, Qwen2.5-Coder-0.5B wrote range(1, 12356); told the
        # request's numbers, range(1, 12346). Asked once more so, then the model's own stays.
        numbers = programs.numbers_in(conv.last_request())
        code = await _program(conv, setup, call, f"{brief} {programs.NUMBERS_NOTE.format(numbers=numbers)}") if numbers else ""
        if code and programs.invents_numbers(code, f"{said}\n{own}"):
            log.info("the program of %s written again holds a number nobody gave: the model's own is kept", call.name)
            return
    if code and programs.invents_inputs(code, conv.last_request(), own):
        log.info("the program of %s written again reads what the request never named: the model's own is kept", call.name)
        return
    if code:
        written_as = _written_as(call)
        call.arguments = {**call.arguments, argument: code}
        setup.rewritten[written_as] = dict(call.arguments)


async def _program(conv: Conversation, setup: Setup, call: ToolCall, brief: str) -> str:
    """A program for the call's tool, written in a short call of its own ("" when none came)."""
    reply = await _short_call(setup, "code", programs.code_prompt(conv.context, brief, call.name), call.name)
    return programs.code_from(reply, {t.name for t in setup.tools})


async def _short_call(setup: Setup, purpose: str, messages: list[ChatMessage], tool: str) -> str:
    """One small unconstrained call at temperature 0 (the likeliest program or text), raced
    against Stop; "" when it failed."""
    profile = setup.profile
    try:
        with llm_purpose(purpose):
            response = await until_stopped(
                setup.backend.complete(messages, None, model=profile.resolved_model(), temperature=0.0, think=False,
                                       max_tokens=profile.answer_token_limit()),
                current_stop_event.get(),
            )
    except Stopped:
        raise
    except (LLMError, LLMIncomplete) as exc:
        log.info("the %s of %s was not written again: %s", purpose, tool, exc)
        return ""
    return response.content


async def _write_text(conv: Conversation, setup: Setup, call: ToolCall) -> None:
    """A small model's text for a file (Tool.text_argument), after this turn's tools returned
    something, written again in a short call of its own from the request and those results: in
    the step's JSON a 0.5B model wrote the key ("timeout") where the value (45) was meant. So is
    a whole file's text its format cannot read (texts.unreadable: "debug=true&port=8080"
    for config.json), and a row appended to a table the turn has not read (the tool's
    `current_text`: its rows are shown, and only new lines are kept). The model's own text stays
    when this one is empty, runs far longer, or does not read where the model's did."""
    tool = next((t for t in setup.step_tools if t.name == call.name), None)
    argument = getattr(tool, "text_argument", "")
    arguments = call.arguments if isinstance(call.arguments, dict) else {}
    action = arguments.get(getattr(tool, "action_parameter", "action")) or "write"
    if not hasattr(tool, "takes_text") or not tool.takes_text(arguments):
        return
    own = tool.kept_text(arguments)
    path = tool.text_place(arguments)
    malformed = action != "append" and texts.unreadable(path, own)
    table = None  # the rows a row is appended to, unless the turn read them already
    if (peek := getattr(tool, "current_text", None)) and texts.read_this_turn(conv.context, path) is None:
        table = await peek(arguments)
    # What informs the text: any result for a file (a read, a program's output); for a note or a
    # fact, another tool's (a scratchpad's "Section saved" tells nothing to write: "note one, then two").
    informing = [m for m in _this_turn(conv.context) if m.role == "tool" and not m.content.startswith("ERROR")
                 and (m.name != call.name or tool.text_in_file)]
    if not malformed and table is None and not informing:
        return  # nothing returned yet: the text comes from the request, as the model wrote it
    if not malformed and table is None and notes.quoted_in(own, conv.last_request()):
        return  # the very words the request quotes ("add 'stock is low'")
    if not tool.text_in_file:
        await _write_note(conv, setup, call, tool, own, "\n".join(m.content for m in informing))
        return
    prompt = texts.text_prompt(conv.context, action, path, conv.clock.date(), current=table)
    reply = await _short_call(setup, "text", prompt, call.name)
    text = texts.text_from(reply, own)
    if text and table is not None:
        text = texts.new_lines(text, table)
    if not tool.text_in_file:
        text = text.strip()
    if text and texts.is_call_text(text, tool):
        return  # a call written where the file's text goes
    if text and action != "append" and texts.unreadable(path, text) and not texts.unreadable(path, own):
        return  # the model's own text reads; this one does not
    if text and text != own:
        written_as = _written_as(call)
        call.arguments = {**arguments, argument: text}
        setup.rewritten[written_as] = dict(call.arguments)


async def _write_note(conv: Conversation, setup: Setup, call: ToolCall, tool, own: str, results: str) -> None:
    """A note's or a fact's text after another tool returned something (`_write_text`): the
    model's own stays when it is what the results said (every word of it there, one at least not
    the request's: "Ines Varga" read from doctor.txt); else it is asked again as one short sentence
    (notes.note_prompt), kept only when that sentence carries something the results said
    and the request did not."""
    request = conv.last_request()
    if notes.grounded(own, results, request):
        return
    for ask in range(len(notes.NOTE_ASKS)):
        prompt = notes.note_prompt(conv.context, tool.text_place(call.arguments), call.name, ask)
        reply = (await _short_call(setup, "text", prompt, call.name) or "").strip()
        text = reply.splitlines()[0].strip() if reply else ""
        if text and len(text) <= notes.NOTE_CHARS and notes.found_news(text, results, request) \
                and not texts.is_call_text(text, tool):
            break
    else:
        return
    written_as = _written_as(call)
    call.arguments = tool.with_kept_text(call.arguments, text)
    setup.rewritten[written_as] = dict(call.arguments)


async def _compute_first(conv: Conversation, setup: Setup, call: ToolCall) -> ToolCall:
    """A small model's short text for a file that holds a number nobody gave (a total, a count:
    values.computed_numbers) becomes a program that works it out and prints it, when the
    profile has a program tool (code_exec) and no program ran this turn: the model added up a
    column of hours to 27 where the total was 37.5, and a 0.5B coder model cannot add but writes
    the program that does. The write comes at a later step, from the program's output; the call
    goes through the same policy as any call of that tool. The model's own call stays when no
    program comes, or the program reads what the request never named."""
    tool = next((t for t in setup.step_tools if t.name == call.name), None)
    arguments = call.arguments if isinstance(call.arguments, dict) else {}
    argument = getattr(tool, "text_argument", "")
    text = arguments.get(argument)
    runner = next((t for t in setup.tools if getattr(t, "code_runs_as_is", False) and t.code_argument), None)
    if not hasattr(tool, "takes_text") or not tool.takes_text(arguments) or not isinstance(text, str) or runner is None:
        return call
    if any(m.role == "tool" and m.name == runner.name for m in _this_turn(conv.context)):
        return call  # a program ran: what it printed is what the text was written from
    if not values.computed_numbers(text, programs.turn_said(conv.context)):
        return call
    path = tool.text_place(arguments)
    program = await _program(conv, setup, ToolCall(id=call.id, name=runner.name, arguments={}),
                             values.compute_brief(path, conv.last_request()))
    if not program or programs.invents_inputs(program, conv.last_request(), ""):
        return call
    program = programs.inclusive_ranges(programs.completed_program(program), conv.last_request())
    log.info("a number nobody gave for %s: worked out by a program first", path)
    return ToolCall(id=call.id, name=runner.name, arguments={runner.code_argument: program}, constrained=call.constrained)


async def _read_first(setup: Setup, call: ToolCall, request: str) -> ToolCall:
    """A small model's write over an existing file this turn has not touched becomes a read of
    that file (the tool's `read_first`): the model decides again with the content in front of it,
    and what it writes then is written from it (`_write_text`). The owner's file is never replaced
    by a model that never saw it."""
    tool = next((t for t in setup.step_tools if t.name == call.name), None)
    read_first = getattr(tool, "read_first", None)
    if read_first is None or not isinstance(call.arguments, dict):
        return call
    touched = {str(c.arguments.get(k)).strip().strip("/").lower() for c in setup.tracker.done
               if isinstance(c.arguments, dict) for k in ("path", "destination") if c.arguments.get(k)}
    arguments = await read_first(call.arguments, touched, request)
    if arguments is None:
        return call
    return ToolCall(id=call.id, name=call.name, arguments=arguments, constrained=call.constrained)


async def _read_named_first(setup: Setup, call: ToolCall, query: str) -> ToolCall:
    """A small model's call of a tool that keeps what it is given (`Tool.keeps`: a list, a note,
    a fact) before any call of the turn worked, keeping words the request never said, for a
    request that names a file that exists, becomes a read of that file: what is kept is then
    written from its content, not invented.
    The read is a call like any other (the filesystem tool's policy and folders)."""
    tool = next((t for t in setup.step_tools if t.name == call.name), None)
    reader = next((t for t in setup.tools if t.name == plan.FILE_TOOL), None)
    if not getattr(tool, "keeps", False) or setup.tracker.done or reader is None or not hasattr(reader, "read_first"):
        return call
    if not notes.found_news(tool.kept_text(call.arguments), tool.kept_text(call.arguments), query):
        return call  # what it keeps is the request's own words ("note done …, not in notes.txt")
    for name in toolselect.file_names(query)[:3]:
        arguments = await reader.read_first({"action": "write", "path": name}, set())
        if arguments is not None:
            log.info("a call of %s before %s was read: the file is read first", call.name, name)
            return ToolCall(id=call.id, name=reader.name, arguments=arguments, constrained=call.constrained)
    return call


def _this_turn(context: list[ChatMessage]) -> list[ChatMessage]:
    start = max((i for i, m in enumerate(context) if m.role == "user" and not m.is_summary), default=-1)
    return context[start + 1:]


def _written_as(call: ToolCall) -> str:
    return json.dumps([call.name, call.arguments], sort_keys=True, default=str)


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
    request = _fit_step(context, tools, setup)
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
                        for event in _show(turn, shown):
                            yield event
                        if guard.looping(msg.content):
                            await _cut_loop(conv, msg, guard)
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
            await _keep_interrupted(conv, msg)
            raise
        except _FATAL as exc:
            await _keep_interrupted(conv, msg)
            raise await _failure(exc, conv, setup, turn) from None
        except (LLMError, LLMIncomplete) as exc:  # e.g. a schema the server could not turn into a grammar
            if msg.content:  # the owner saw the start of an answer: the turn failed
                await _keep_interrupted(conv, msg)
                raise await _failure(exc, conv, setup, turn) from None
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
    turn.decision = salvage.salvaged(content, offered) if finish == "length" else schema.parse_decision(content, offered)
    if turn.decision is None:
        log.info("constrained call gave nothing usable: %.200r", content)


async def answer_from_results(conv: Conversation, setup: Setup, turn: Turn) -> AsyncIterator[AgentEvent]:
    """The answer of a small model's turn after its tools ran: the request and this turn's
    results in a short prompt of their own, streamed and saved as the turn's answer; a program's
    short output that the answer leaves out is shown under it (values.unstated_output)."""
    profile = setup.profile

    def stream(temperature: float, again: bool = False):
        return setup.backend.stream_complete(
            prompts.results_prompt(conv.context, again, focused=setup.tracker.wandered), None, model=profile.resolved_model(),
            temperature=temperature, max_tokens=profile.answer_token_limit(),
        )

    said = refusals.results_said(conv.context)
    async for event in _streamed(_unless_refusal(stream, profile.temperature, said), conv, setup, turn, None):
        yield event
    runners = {t.name for t in setup.tools if getattr(t, "code_runs_as_is", False)}
    if output := values.unstated_output(conv.context, turn.message.content, runners):
        for event in _show(turn, values.output_note(output)):
            yield event
    turn.tokens = conv.token_count + estimate_text(turn.message.content)  # the chat's context, not this prompt
    if turn.thinking_open:
        yield ThinkingEnd()
    await conv.save_streaming(turn.message, tokens=turn.tokens)


async def _unless_refusal(stream, temperature: float, said: str):
    """The answer's chunks, its first words held back until they show it is an answer: a small
    model writes a stock refusal ("I'm sorry, but I can't assist with that") now and then over
    results its tools just returned, or code that would fetch what its tool already fetched
    ("To fetch the stock data you can use requests: ```python …"). Such a start is dropped and
    the answer asked once more, at temperature 0, as a report of what was done; refused again,
    the answer is `said` (what the tools returned)."""
    for again in (False, True):
        refused = False
        async for chunk in _held_refusal(stream(0.0 if again else temperature, again), code_too=not again):
            if chunk is None:  # it ends after a None
                refused = True
            else:
                yield chunk
        if not refused:
            return
        log.info("a small model refused to answer from its results, or wrote code instead")
    yield LLMChunk(content=said, done=True, finish_reason="stop")


async def _held_refusal(stream, code_too: bool = True):
    """A stream's chunks, its first words held back (refusals.HELD_CHARS, or REFUSAL_CHARS when
    `code_too` is off); None (and the stream closed) when they are a stock refusal or, with
    `code_too`, hold a code block (refusals.not_an_answer)."""
    held, text = [], ""
    limit = refusals.HELD_CHARS if code_too else refusals.REFUSAL_CHARS
    try:
        async for chunk in stream:
            if held is None:
                yield chunk
                continue
            held.append(chunk)
            text += chunk.content or ""
            if len(text) < limit and not chunk.done and not (code_too and refusals.holds_code(text)):
                continue
            if refusals.not_an_answer(text, code_too):
                yield None
                return
            for kept in held:
                yield kept
            held = None
        if held is not None:  # the whole answer was shorter than the look-ahead
            if refusals.not_an_answer(text, code_too):
                yield None
                return
            for kept in held:
                yield kept
    finally:
        with contextlib.suppress(Exception):
            await stream.aclose()


def _fit_step(context: list[ChatMessage], tools: list[Tool], setup: Setup):
    """A constrained step's request: with the catalogue in the system prompt no tools are sent;
    otherwise the step's tools go as the chat template shows them (what a small model was
    trained on; their schemas are also the step's grammar)."""
    try:
        return fit_request(context, [] if setup.catalogue else tools, setup.profile, setup.limit, "", set(t.name for t in tools))
    except DoesNotFit as exc:
        raise TurnFailed(ErrorEvent(str(exc), code="context_too_large")) from None


async def _streamed(stream, conv: Conversation, setup: Setup, turn: Turn, text_filter: CallTextFilter | None):
    """The call's deltas into `turn`; a stop or failure keeps the partial answer as interrupted
    and raises Stopped or TurnFailed; the HTTP response is closed either way."""
    try:
        async for event in _receive(stream, conv, turn, text_filter):
            yield event
    except (Stopped, LLMError, Exception) as exc:
        await _keep_interrupted(conv, turn.message)
        raise await _failure(exc, conv, setup, turn) from None
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
            for event in _show(turn, shown):
                yield event
            if guard.looping(msg.content):
                await _cut_loop(conv, msg, guard)
                return  # the stream is closed by the caller: the model stops writing
        turn.calls.extend(chunk.tool_calls)
        if chunk.done:
            turn.tokens = chunk.prompt_tokens + chunk.completion_tokens
        if chunk.content or chunk.thinking:
            await conv.save_streaming(msg, status="partial", force=False)
        if text_filter is not None and text_filter.enough:
            return  # a call found, then only talk: the call runs now (the stream is closed)


def _show(turn: Turn, text: str) -> list[AgentEvent]:
    """Text of the answer, added to it: the events that show it (the thinking closed first)."""
    turn.message.content += text
    events: list[AgentEvent] = [ThinkingEnd()] if turn.thinking_open else []
    turn.thinking_open = False
    return [*events, TextDelta(text)]


async def _cut_loop(conv: Conversation, msg: ChatMessage, guard: RunawayGuard) -> None:
    """The answer ended in a loop: it keeps the loop said once (stream_end's content replaces
    what the page showed)."""
    log.info("answer cut: it repeated itself (%d characters kept of %d)", len(guard.cut or ""), len(msg.content))
    msg.content = guard.cut or ""
    msg.meta = {**(msg.meta or {}), "cut": "repetition"}
    await conv.save_streaming(msg, status="partial", force=True)
    if msg.db_id is not None:
        await conv.save_meta(msg)


async def _keep_interrupted(conv: Conversation, msg: ChatMessage) -> None:
    if msg.content or msg.thinking:
        await conv.save_streaming(msg, status="interrupted")


async def _failure(exc: Exception, conv: Conversation, setup: Setup, turn: Turn) -> Exception:
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
