"""The agent loop: run, run_stream, run_ephemeral.

run_stream: user row saved → pre-turn workers → optional planning → tool-calling loop up to
max_iterations (one LLM call: agent.turns; each tool call: agent.tool_step) → stream_end →
post-turn workers. Stop is cooperative (current_stop_event) and ends the loop as `Stopped`; a
failed call as `TurnFailed` with its error frame; a partial answer is kept as `interrupted`.
"""

from __future__ import annotations

import contextlib
import logging
from typing import AsyncIterator

from agent import constrained, planning, workers
from agent.approvals import RunGuard, current_guard
from agent.calls import CallTracker, DoesNotFit, fit_request
from agent.conversation import Conversation, DBConversation
from agent.events import (
    AgentEvent,
    ApprovalRequired,
    ApprovalResolved,
    ErrorEvent,
    PlanReady,
    StreamEnd,
    StreamStart,
    StreamStopped,
    SubagentTextDelta,
    TextDelta,
    ThinkingDelta,
    ThinkingEnd,
    ToolEvent,
    ToolStarted,
    TurnThinking,
    mark_subagent,
)
from agent.llm import BackendRegistry
from agent.messages import ChatMessage
from agent.models import Profile
from agent.planning import should_plan
from agent.stopping import Stopped, raise_if_stopped, until_stopped
from agent.tool_step import run_tool
from agent.turns import (
    Setup,
    Turn,
    TurnFailed,
    answer_from_results,
    decide_step,
    rewrite_call,
    stream_turn,
    turn_context,
)
from agent.window import effective_window
from memory_app.services import get_summary
from navi_project.hop import db_hop
from tools_app.context import (
    current_chat_session_id,
    current_event_sink,
    current_run_id,
    current_run_taint,
    current_session_id,
    current_stop_event,
    current_user_id,
)
from tools_app.registry import ToolRegistry

log = logging.getLogger(__name__)

# Events a sub-agent forwards to its parent (its text becomes the spawn_agent result instead).
_SUBAGENT_FORWARDED = (ToolStarted, ToolEvent, TurnThinking, ApprovalRequired, ApprovalResolved)


class RunFailed(Exception):
    """`run()` could not produce an answer; the message says why and what to do."""


class Agent:
    def __init__(self, tools: ToolRegistry, backends: BackendRegistry) -> None:
        self.tools = tools
        self.backends = backends

    # --- entry points -----------------------------------------------------------------
    async def run_stream(
        self, session_id: str, user_message: str, images: list[str] | None = None, *, planning: bool = True,
        begun: tuple | BaseException | None = None,
    ) -> AsyncIterator[AgentEvent]:
        """Stream one turn of a persisted session. `begun`: what `begin_turn` returned (or
        raised) for this turn in the caller's own thread hop (the run manager's claim)."""
        if begun is None:
            begun = await db_hop(self.begin_turn, session_id, user_message, images, current_run_id.get())
        if isinstance(begun, BaseException):
            raise begun
        conv, guard = begun
        current_session_id.set(conv.id)
        current_chat_session_id.set(conv.id)
        current_user_id.set(conv.owner_id)
        current_guard.set(guard)
        if source := current_run_taint.get():  # a routine made after reading untrusted content
            guard.start_tainted(source)
        yield StreamStart(user_message=user_message)
        # Provided tools (MCP servers) connect on first use, each bounded; Stop does not wait for
        # them (a stop here ends the run at the loop's first check).
        with contextlib.suppress(Stopped):
            await until_stopped(self.tools.prepare_provided(conv.owner_id), current_stop_event.get())
        profile = conv.session.profile  # loaded with the session
        backend = self.backends.get(profile.llm_backend)
        limit = await effective_window(backend, profile)
        conv.window = limit
        for event in await workers.run_phase(workers.pre_turn_workers, conv, profile, backend, "pre", limit):
            yield event
        try:
            setup = await self._setup(profile, backend, limit)
        except Stopped:
            yield StreamStopped()
            return
        if planning and should_plan(profile, user_message):
            plan = await self._run_planning(conv, setup)
            if plan:
                yield PlanReady(plan=plan)
        async for event in self._loop(conv, profile, backend, limit=limit, setup=setup):
            yield event

    def begin_turn(
        self, session_id: str, user_message: str, images: list[str] | None, run_id: str, session=None
    ) -> tuple[DBConversation, RunGuard]:
        """The start of a turn, sync, for one thread hop (each hop cost 2-3 ms while other runs
        stream): the session and its context, the run's guard, the user's message committed
        before any LLM call (a crash or an unreachable model never loses it), the user tools
        written or toggled elsewhere since the last run, and the memory summary for the first call.
        `session`: its row as the run's claim just read it, if it did."""
        message = ChatMessage(role="user", content=user_message, images=list(images or []))
        conv = DBConversation.load(session_id, session=session)
        guard = RunGuard.load(conv.owner_id, conv.id, run_id, conversation=conv)
        conv.add_now(message)
        self.tools.refresh_user_tools_now()
        self.tools.load_provided(conv.owner_id)
        conv.memory_ahead = get_summary(conv.owner_id)
        return conv, guard

    async def run(self, session_id: str, user_message: str, images: list[str] | None = None) -> str:
        """Non-streaming turn (no planning); raises RunFailed on error or stop."""
        content = ""
        async for event in self.run_stream(session_id, user_message, images, planning=False):
            if isinstance(event, StreamEnd):
                content = event.content
            elif isinstance(event, ErrorEvent):
                raise RunFailed(event.message)
            elif isinstance(event, StreamStopped):
                raise RunFailed("the run was stopped before it finished")
        return content

    async def run_ephemeral(self, user_message: str, profile_id: str) -> str:
        """A sub-agent: no DB rows, its own `subagent_<uuid12>` scope, events sent to the parent."""
        profile = await _load_profile(profile_id)
        conv = Conversation(profile.id, owner_id=current_user_id.get())
        parent_sink = current_event_sink.get()
        current_session_id.set(conv.id)
        if current_guard.get() is None:  # a sub-agent shares its parent run's guard (and taint)
            current_guard.set(await RunGuard.for_run(conv.owner_id, current_chat_session_id.get(), current_run_id.get()))
        await conv.add(ChatMessage(role="user", content=user_message))
        backend = self.backends.get(profile.llm_backend)
        content, problem = "", ""
        async for event in self._loop(conv, profile, backend, is_subagent=True):
            if isinstance(event, StreamEnd):
                content = event.content
            elif isinstance(event, ErrorEvent):
                problem = event.message
            elif isinstance(event, StreamStopped):
                problem = "stopped by the owner"
            elif parent_sink is not None and isinstance(event, _SUBAGENT_FORWARDED):
                parent_sink.put_nowait(mark_subagent(event))
            elif parent_sink is not None and isinstance(event, TextDelta):
                parent_sink.put_nowait(SubagentTextDelta(event.delta))  # its card shows the text as it comes
            elif parent_sink is not None and not isinstance(event, (ThinkingDelta, ThinkingEnd)):
                parent_sink.put_nowait(event)
        if problem:
            raise RunFailed(f"sub-agent failed: {problem}")
        return content

    # --- planning -----------------------------------------------------------------------
    async def _run_planning(self, conv: Conversation, setup: Setup) -> str | None:
        """One short call on the answer call's prefix (agent.planning): a validated plan or None.

        The plan guides this turn's answer calls only; it never enters later turns' context.
        """
        context = await turn_context(conv, setup)
        if setup.constrained:  # the tools are in the system prompt's catalogue, not the request
            schemas = None
        else:
            try:  # the answer call's own selection and form of tools: one shared prefix, one cache
                schemas = fit_request(context, setup.tools, setup.profile, setup.limit, conv.last_request(), set()).schemas
            except DoesNotFit:
                return None  # the answer call reports it
        try:
            plan = await until_stopped(
                planning.make_plan(setup.backend, setup.profile, context, schemas), current_stop_event.get()
            )
        except Stopped:
            return None  # the loop reports stream_stopped
        if plan:
            await planning.remember_plan(conv, plan)
        return plan

    # --- the tool-calling loop -------------------------------------------------------------
    async def _loop(
        self, conv: Conversation, profile: Profile, backend, *, is_subagent: bool = False, limit: int = 0,
        setup: Setup | None = None,
    ) -> AsyncIterator[AgentEvent]:
        """The steps of one turn; a stop or a failed LLM call ends it with its frame."""
        try:
            setup = setup or await self._setup(profile, backend, limit)
            async for event in self._steps(conv, setup, is_subagent):
                yield event
        except Stopped:
            yield StreamStopped()
        except TurnFailed as exc:
            yield exc.event

    async def _steps(self, conv: Conversation, setup: Setup, is_subagent: bool) -> AsyncIterator[AgentEvent]:
        stop = current_stop_event.get()
        query = conv.last_request()
        for _ in range(max(1, setup.profile.max_iterations)):
            raise_if_stopped(stop)
            turn, offer = Turn(), setup.tracker.offer(setup.tools)
            if setup.constrained and offer:
                async for event in self._constrained_step(conv, setup, offer, turn, query):
                    yield event
            else:
                async for event in stream_turn(conv, setup, offer, turn, query):
                    yield event
            if not turn.calls:
                async for event in self._answer(conv, setup, turn, is_subagent):
                    yield event
                return
            # A tool-calling turn: the whole reasoning block closes the live thinking display.
            if turn.message.thinking:
                yield TurnThinking(thinking=turn.message.thinking)
            async for event in self._run_calls(conv, setup, turn.calls, offer, is_subagent):
                yield event
            if await conv.current_profile_id() != setup.profile.id:
                tracker = setup.tracker
                setup = await self._setup(await _load_profile(conv.profile_id))
                setup.tracker.continue_from(tracker)  # one turn: the switch was its step
        async for event in self._give_up(conv, setup):
            yield event

    async def _constrained_step(self, conv: Conversation, setup: Setup, offer: list, turn: Turn, query: str):
        """One step on a server that enforces schemas (agent.constrained): the model chooses
        "answer" or one valid call under the step's schema. The answer then streams
        unconstrained: on a profile that caps its tools (a small model's), after tool results,
        from a short prompt of the request and the results (a small model asked in the long
        context writes the call again, or copies the instruction); otherwise in the step's own
        context. A call written in that answer anyway is written again under its schema when
        it is not valid: what runs is never malformed."""
        decision = await decide_step(conv, setup, offer, turn, query)
        if decision is not None and decision.call is not None:
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
        if call.name not in names or self.tools.prepare(call.name, call.arguments, repair=setup.profile.repair_arguments,
                                                        offered=names).problem is not None:
            rewritten = await rewrite_call(conv, setup, turn, call)
            if rewritten is not None and rewritten.call is not None:
                call = rewritten.call
        if turn.calls != [call]:
            turn.calls = [call]
            turn.message.tool_calls = [call]
            await conv.save_streaming(turn.message, tokens=turn.tokens)

    async def _run_calls(self, conv, setup: Setup, calls: list, offer: list, is_subagent: bool):
        allowed = [t.name for t in offer]
        try:
            for call in calls:
                async for event in run_tool(self.tools, conv, call, allowed, setup.profile, is_subagent, setup.tracker):
                    yield event
                raise_if_stopped(current_stop_event.get())
        except Stopped:
            await setup.tracker.flush()
            raise
        await setup.tracker.flush()

    async def _answer(self, conv: Conversation, setup: Setup, turn: Turn, is_subagent: bool):
        """A turn without tool calls is the answer (saved with the context's size by
        stream_turn): stream_end, then the post-turn workers."""
        if is_subagent and turn.message.thinking:
            yield TurnThinking(thinking=turn.message.thinking)
        await setup.tracker.flush()  # nothing to write on a plain answer; counted before the run is seen ending
        yield StreamEnd(turn.message.content, turn.tokens, setup.limit)
        if not is_subagent:
            for event in await workers.run_phase(
                workers.post_turn_workers, conv, setup.profile, setup.backend, "post", setup.limit
            ):
                yield event

    @staticmethod
    async def _give_up(conv: Conversation, setup: Setup) -> AsyncIterator[AgentEvent]:
        text = (
            f"I stopped after {setup.profile.max_iterations} tool-calling steps (this profile's max_iterations) "
            "without reaching a final answer. Say 'continue' to let me go on, or raise max_iterations "
            "for the profile in the admin."
        )
        await conv.add(ChatMessage(role="assistant", content=text))
        yield TextDelta(text)
        yield StreamEnd(text, conv.token_count, setup.limit)

    async def _setup(self, profile: Profile, backend=None, limit: int = 0) -> Setup:
        backend = backend or self.backends.get(profile.llm_backend)
        limit = limit or await effective_window(backend, profile)
        tools, model = self._offered(profile), profile.resolved_model()
        setup = Setup(profile, backend, tools, limit, CallTracker(backend.name, model))
        if tools and profile.tool_calling != Profile.ToolCalling.NATIVE:
            setup.constrained = await until_stopped(constrained.support(backend, model), current_stop_event.get())
            if not setup.constrained and profile.tool_calling == Profile.ToolCalling.CONSTRAINED:
                log.warning("profile %s asks for constrained tool calls, but %s/%s enforces no JSON schema: "
                            "tool calls are read from text", profile.id, backend.name, model)
            # Every tool offered: one catalogue in the system prompt, the same in every chat (a
            # cached prefix). A profile that caps its tools (a small model's) sends each step's
            # few tools the way the chat template shows them instead.
            setup.catalogue = constrained.catalogue(tools) if setup.constrained and not profile.max_tools else ""
        return setup

    def _offered(self, profile: Profile) -> list:
        """The profile's tools this user may be offered (no host tools without the permission,
        nothing the policy denies)."""
        guard = current_guard.get()
        user_id = guard.user_id if guard is not None else current_user_id.get()
        tools = self.tools.tools_for(profile.enabled_tools, user_id, profile.id)
        if guard is None:
            return tools
        return [t for t in tools if guard.offers(t.name, profile.tool_policy)]


async def _load_profile(profile_id: str) -> Profile:
    profile = await Profile.objects.filter(pk=profile_id).afirst()
    if profile is None:
        profile = await Profile.objects.order_by("id").afirst()
    if profile is None:
        raise RunFailed("no agent profiles exist; run `python manage.py migrate` to create the defaults")
    return profile
