"""The agent loop: run, run_stream, run_ephemeral.

run_stream: user row saved → pre-turn workers → planning (turn.planning) → up to max_iterations
steps (an LLM call or a constrained step: turn.turns; tool calls: toolcalling.tool_step) → the
answer or the give-up (turn.ending) → post-turn workers. Stop (current_stop_event) ends it as
`Stopped`, a failed call as `TurnFailed` with its error frame; a partial answer stays `interrupted`.
"""

from __future__ import annotations

import contextlib
from typing import AsyncIterator

from agent.context.conversation import Conversation, DBConversation
from agent.context.window import effective_window
from agent.frames.events import AgentEvent, ErrorEvent, PlanReady, StreamEnd, StreamStart, StreamStopped, TurnThinking
from agent.llm import BackendRegistry
from agent.llm.choice import choose_model
from agent.llm.messages import ChatMessage
from agent.models import Profile
from agent.toolcalling.guards import ledger
from agent.toolcalling.tool_step import run_tool
from agent.trust.approvals import RunGuard, current_guard, offered_tools
from agent.turn import constrained, ending, subagent, turns, workers
from agent.turn.planning import plan_turn, should_plan
from agent.turn.setup import Setup, make_setup
from agent.turn.stopping import Stopped, raise_if_stopped, until_stopped
from agent.turn.turns import RunFailed, Turn, TurnFailed
from memory_app.services import get_summary, has_facts
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
        if self.tools.provided_pending(conv.owner_id):
            with contextlib.suppress(Stopped):
                await until_stopped(self.tools.prepare_provided(conv.owner_id), current_stop_event.get())
        profile = conv.session.profile  # loaded with the session: the turn's own copy
        conv.model_choice = await choose_model(self.backends, profile, conv.session.model)  # the one rule
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
            plan = await plan_turn(conv, setup, await turns.turn_context(conv, setup))
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
        written or toggled elsewhere since the last run, and the memory summary for the first call
        (and whether the owner has facts to recall).
        `session`: its row as the run's claim just read it, if it did."""
        message = ChatMessage(role="user", content=user_message, images=list(images or []))
        conv = DBConversation.load(session_id, session=session)
        guard = RunGuard.load(conv.owner_id, conv.id, run_id, conversation=conv)
        conv.add_now(message)
        self.tools.refresh_user_tools_now()
        self.tools.load_provided(conv.owner_id)
        conv.memory_ahead = get_summary(conv.owner_id)
        conv.facts_known = has_facts(conv.owner_id)  # no facts: no search for the ones the request recalls
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
        profile = await turns.load_profile(profile_id)
        conv = Conversation(profile.id, owner_id=current_user_id.get())
        parent_sink = current_event_sink.get()
        current_session_id.set(conv.id)
        if current_guard.get() is None:  # a sub-agent shares its parent run's guard (and taint)
            current_guard.set(await RunGuard.for_run(conv.owner_id, current_chat_session_id.get(), current_run_id.get()))
        await conv.add(ChatMessage(role="user", content=user_message))
        await choose_model(self.backends, profile)  # a sub-agent's profile follows the same rule
        backend = self.backends.get(profile.llm_backend)
        content, problem = await subagent.relay(self._loop(conv, profile, backend, is_subagent=True), parent_sink)
        if problem:
            raise RunFailed(f"sub-agent failed: {problem}")
        return content

    # --- the tool-calling loop -------------------------------------------------------------
    async def _loop(
        self, conv: Conversation, profile: Profile, backend, *, is_subagent: bool = False, limit: int = 0,
        setup: Setup | None = None,
    ) -> AsyncIterator[AgentEvent]:
        """The steps of one turn; a stop or a failed LLM call ends it with its frame. The repair
        groups that fire are counted for the turn (a sub-agent's for its parent's turn) and kept
        with its last assistant message (turn.ending)."""
        with contextlib.nullcontext() if is_subagent else ledger.counting():
            try:
                setup = setup or await self._setup(profile, backend, limit)
                async for event in self._steps(conv, setup, is_subagent):
                    yield event
            except Stopped:
                if not is_subagent:
                    await ending.keep_guards(conv)
                yield StreamStopped()
            except TurnFailed as exc:
                if not is_subagent:
                    await ending.keep_guards(conv)
                yield exc.event

    async def _steps(self, conv: Conversation, setup: Setup, is_subagent: bool) -> AsyncIterator[AgentEvent]:
        stop = current_stop_event.get()
        query = conv.last_request()
        for _ in range(max(1, setup.profile.max_iterations)):
            raise_if_stopped(stop)
            turn, offer = Turn(), setup.tracker.offer(setup.tools)
            if setup.constrained and offer:
                async for event in constrained.constrained_step(conv, setup, offer, turn, query, self.tools):
                    yield event
            else:
                async for event in turns.stream_turn(conv, setup, offer, turn, query):
                    yield event
            if not turn.calls:
                async for event in ending.answer(conv, setup, turn, is_subagent):
                    yield event
                return
            # A tool-calling turn: the whole reasoning block closes the live thinking display.
            if turn.message.thinking:
                yield TurnThinking(thinking=turn.message.thinking)
            async for event in self._run_calls(conv, setup, turn.calls, offer, is_subagent):
                yield event
            if await conv.current_profile_id() != setup.profile.id:
                setup = await self._switched(conv, setup)
        async for event in ending.give_up(conv, setup):
            yield event

    async def _run_calls(self, conv, setup: Setup, calls: list, offer: list, is_subagent: bool):
        """The turn's tool calls in order (agent.toolcalling.tool_step); the counters are written even on a stop."""
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

    async def _switched(self, conv: Conversation, setup: Setup) -> Setup:
        """The setup after switch_profile: the chat's own model outlives it; one turn, one tracker."""
        switched = await turns.load_profile(conv.profile_id)
        await choose_model(self.backends, switched, conv.session.model if isinstance(conv, DBConversation) else "")
        new = await self._setup(switched)
        new.tracker.continue_from(setup.tracker)  # the switch was this turn's step
        return new

    async def _setup(self, profile: Profile, backend=None, limit: int = 0) -> Setup:
        """What the turn's calls use of `profile` (switch_profile may change it mid-run)."""
        backend = backend or self.backends.get(profile.llm_backend)
        return await make_setup(profile, backend, offered_tools(self.tools, profile), limit)
