"""The agent loop (seeds' agent.md): run, run_stream, run_ephemeral.

run_stream: user row saved → pre-turn workers → optional planning → tool-calling loop up to
max_iterations (stream the LLM, run tool calls, append results) → stream_end → post-turn
workers. Stop is cooperative (current_stop_event); errors become an `error` event, and the
partial answer is kept as `interrupted`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import AsyncIterator

from django.conf import settings

from agent import planning, policy, prompts, workers
from agent.approvals import FRAME_DECISION, RunGuard, Verdict, current_guard
from agent.calls import CallTracker, DoesNotFit, fit_request, normalise_arguments
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
    TextDelta,
    ThinkingDelta,
    ThinkingEnd,
    ToolEvent,
    ToolStarted,
    TurnThinking,
    mark_subagent,
)
from agent.llm import BackendRegistry, LLMError
from agent.llm.base import LLMContextOverflow, context_window
from agent.messages import ChatMessage, ToolCall
from agent.models import Profile
from agent.planning import should_plan
from agent.stopping import Stopped, stoppable, until_stopped
from agent.tool_trace import ToolTrace
from agent.toolcalls import CallTextFilter, extract_calls
from agent.window import effective_window, estimate_text
from navi_project import metrics
from sessions_app.services import session_files_dir
from tools_app.base import ToolResult
from tools_app.context import (
    current_chat_session_id,
    current_event_sink,
    current_run_id,
    current_session_id,
    current_stop_event,
    current_user_id,
)
from tools_app.registry import ToolRegistry
from tools_app.workspace import workspace_for

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
        self, session_id: str, user_message: str, images: list[str] | None = None, *, planning: bool = True
    ) -> AsyncIterator[AgentEvent]:
        """Stream one turn of a persisted session."""
        conv = await DBConversation.open(session_id)
        current_session_id.set(conv.id)
        current_chat_session_id.set(conv.id)
        current_user_id.set(conv.owner_id)
        current_guard.set(await RunGuard.for_run(conv.owner_id, conv.id, current_run_id.get()))
        yield StreamStart(user_message=user_message)
        # Committed before any LLM call: a crash or an unreachable model never loses it.
        await conv.add(ChatMessage(role="user", content=user_message, images=list(images or [])))
        profile = await _load_profile(conv.profile_id)
        backend = self.backends.get(profile.llm_backend)
        await self.tools.refresh_user_tools()  # tools written or toggled elsewhere since
        limit = await effective_window(backend, profile)
        for event in await self._workers(workers.pre_turn_workers, conv, profile, "pre", limit):
            yield event
        if planning and should_plan(profile, user_message):
            plan = await self._run_planning(conv, profile)
            if plan:
                yield PlanReady(plan=plan)
        async for event in self._loop(conv, profile, backend, limit=limit):
            yield event

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
            elif parent_sink is not None and not isinstance(event, (TextDelta, ThinkingDelta, ThinkingEnd)):
                parent_sink.put_nowait(event)
        if problem:
            raise RunFailed(f"sub-agent failed: {problem}")
        return content

    # --- planning -----------------------------------------------------------------------
    async def _run_planning(self, conv: Conversation, profile: Profile) -> str | None:
        """One short call on the answer call's prefix (agent.planning): a validated plan or None.

        The plan guides this turn's answer calls only; it never enters later turns' context.
        """
        try:
            backend = self.backends.get(profile.llm_backend)
        except LLMError as exc:
            log.info("planning skipped: %s", exc)
            return None
        tools = [t.schema() for t in self._offered(profile)] or None  # the answer call's tools
        context = await prompts.build_context(profile, conv.context, conv.owner_id)
        try:
            plan = await until_stopped(planning.make_plan(backend, profile, context, tools), current_stop_event.get())
        except Stopped:
            return None  # the loop reports stream_stopped
        if plan:
            await planning.remember_plan(conv, plan)
        return plan

    # --- the tool-calling loop -------------------------------------------------------------
    async def _loop(
        self, conv: Conversation, profile: Profile, backend, *, is_subagent: bool = False, limit: int = 0
    ) -> AsyncIterator[AgentEvent]:
        stop = current_stop_event.get()
        tools = self._offered(profile)
        limit = limit or await effective_window(backend, profile)
        tracker = CallTracker(backend.name, profile.resolved_model())
        query = next((m.content for m in reversed(conv.context) if m.role == "user" and not m.is_summary), "")
        for _ in range(max(1, profile.max_iterations)):
            if stop is not None and stop.is_set():
                yield StreamStopped()
                return
            turn = _Turn()
            offer = tracker.offer(tools)
            async for event in self._stream_turn(conv, profile, backend, offer, turn, is_subagent, limit, query, tracker.used):
                yield event
            if turn.outcome in ("stopped", "error"):
                return
            if not turn.calls:
                await conv.set_token_count(turn.tokens)
                if is_subagent and turn.message.thinking:
                    yield TurnThinking(thinking=turn.message.thinking)
                yield StreamEnd(turn.message.content, turn.tokens, limit)
                await tracker.flush()
                if not is_subagent:
                    for event in await self._workers(workers.post_turn_workers, conv, profile, "post", limit):
                        yield event
                return
            # A tool-calling turn: the whole reasoning block closes the live thinking display.
            if turn.message.thinking:
                yield TurnThinking(thinking=turn.message.thinking)
            await conv.set_token_count(turn.tokens)
            allowed = [t.name for t in offer]
            for call in turn.calls:
                async for event in self._run_tool(conv, call, allowed, profile, is_subagent, tracker):
                    yield event
                if stop is not None and stop.is_set():
                    await tracker.flush()
                    yield StreamStopped()
                    return
            await tracker.flush()
            if await conv.current_profile_id() != profile.id:
                profile = await _load_profile(conv.profile_id)
                backend = self.backends.get(profile.llm_backend)
                tools = self._offered(profile)
                limit = await effective_window(backend, profile)
                tracker = CallTracker(backend.name, profile.resolved_model())
        text = (
            f"I stopped after {profile.max_iterations} tool-calling steps (this profile's max_iterations) "
            "without reaching a final answer. Say 'continue' to let me go on, or raise max_iterations "
            "for the profile in the admin."
        )
        await conv.add(ChatMessage(role="assistant", content=text))
        yield TextDelta(text)
        yield StreamEnd(text, conv.token_count, limit)

    def _offered(self, profile: Profile) -> list:
        """The profile's tools this user may be offered (no host tools without the permission,
        nothing the policy denies)."""
        guard = current_guard.get()
        tools = self.tools.tools_for(profile.enabled_tools)
        if guard is None:
            return tools
        return [t for t in tools if guard.offers(t.name, profile.tool_policy)]

    async def _stream_turn(self, conv, profile, backend, tools, turn: "_Turn", is_subagent: bool, limit, query, keep):
        """Stream one LLM call into `turn`, yielding thinking/text deltas and persisting as it goes.
        Calls the model writes as text are held back from the stream and recovered (agent.toolcalls)."""
        stop = current_stop_event.get()
        msg = turn.message
        thinking_open = False
        context = planning.with_plan(await prompts.build_context(profile, conv.context, conv.owner_id), conv)
        try:
            request = fit_request(context, tools, profile, limit, query, keep)
        except DoesNotFit as exc:
            turn.outcome = "error"
            yield ErrorEvent(str(exc))
            return
        names = frozenset(t.name for t in request.tools)
        text_filter = CallTextFilter(names) if profile.recover_tool_calls and names else None
        stream = backend.stream_complete(
            context,
            request.schemas,
            model=profile.resolved_model(),
            temperature=profile.temperature,
            max_tokens=profile.answer_token_limit(),
        )
        try:
            async for chunk in stoppable(stream, stop):
                if stop is not None and stop.is_set():
                    turn.outcome = "stopped"
                    break
                if chunk.thinking:
                    msg.thinking += chunk.thinking
                    thinking_open = True
                    if not is_subagent:
                        yield ThinkingDelta(chunk.thinking)
                shown = text_filter.feed(chunk.content) if text_filter and chunk.content else chunk.content
                if shown:
                    msg.content += shown
                    if thinking_open and not is_subagent:
                        yield ThinkingEnd()
                    thinking_open = False
                    if not is_subagent:
                        yield TextDelta(shown)
                turn.calls.extend(chunk.tool_calls)
                if chunk.done:
                    turn.tokens = chunk.prompt_tokens + chunk.completion_tokens
                if chunk.content or chunk.thinking:
                    if msg.db_id is None and conv.persistent:
                        await conv.add(msg, status="partial")
                    else:
                        await conv.update(msg, status="partial", force=False)
        except Stopped:
            turn.outcome = "stopped"
        except LLMError as exc:
            turn.outcome = "error"
            turn.error = str(exc)
            if exc.mid_answer and (msg.content or msg.thinking):
                turn.error += "; the partial answer was kept — send the message again to retry"
            if isinstance(exc, LLMContextOverflow):
                # The next turn's pre-turn compression sees the context as full and shrinks it.
                window = context_window(backend.name, profile.resolved_model())
                await conv.set_token_count(max(exc.prompt_tokens, window))
        except Exception as exc:  # anything unexpected must still end the turn cleanly
            log.exception("LLM stream failed")
            turn.outcome = "error"
            turn.error = f"the model call failed unexpectedly: {type(exc).__name__}: {exc}"
        finally:
            with contextlib.suppress(Exception):
                await stream.aclose()
        if text_filter is not None and turn.outcome == "ok":
            rest = self._recover_calls(text_filter, turn, names)
            if rest and not is_subagent:
                yield TextDelta(rest)
        if not turn.tokens:  # the server reported no usage: count locally
            turn.tokens = request.prompt_tokens + estimate_text(msg.content + msg.thinking)
        if thinking_open and not turn.calls and turn.outcome == "ok" and not is_subagent:
            yield ThinkingEnd()
        if turn.outcome != "ok":
            if msg.content or msg.thinking:
                if msg.db_id is None:
                    await conv.add(msg, status="interrupted")
                else:
                    await conv.update(msg, status="interrupted")
            yield StreamStopped() if turn.outcome == "stopped" else ErrorEvent(turn.error)
            return
        msg.tool_calls = list(turn.calls)
        if msg.db_id is None:
            await conv.add(msg)
        else:
            await conv.update(msg, status="complete")

    @staticmethod
    def _recover_calls(text_filter: CallTextFilter, turn: "_Turn", names: frozenset[str]) -> str:
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

    async def _run_tool(
        self, conv: Conversation, call: ToolCall, allowed: list[str], profile: Profile, is_subagent: bool,
        tracker: CallTracker | None = None,
    ) -> AsyncIterator[AgentEvent]:
        """Check the call (permission, policy, the owner's approval), run it, forward what it
        emits (sub-agent events) while it runs, and append the result to the conversation."""
        call.arguments = normalise_arguments(call.arguments, profile.repair_arguments)
        yield ToolStarted(tool=call.name, args=call.arguments, recovered=call.recovered)
        guard = current_guard.get()
        verdict = None
        if guard is not None:
            verdict = await guard.check(call.name, call.arguments, profile.id, profile.tool_policy, is_subagent=is_subagent)
            if verdict.ask:
                async for event in self._ask_owner(guard, verdict, call):
                    yield event
        started = time.monotonic()
        trace = ToolTrace()
        if verdict is not None and not verdict.run:
            result = ToolResult(False, error=verdict.refusal)
        else:
            result = None
            async for item in self._execute(call, allowed, profile.repair_arguments):
                if isinstance(item, ToolResult):
                    result = item
                else:
                    trace.note(item)
                    yield item
        content = result.to_message_content()
        source = self._untrusted_source(call, result, conv)
        if source:
            content = policy.wrap_untrusted(content, source)
            guard.taint(source)
        if tracker is not None:
            content += tracker.after(call, result)
        metrics.tool_call(call.name, call.name in allowed, verdict, result.success)
        yield ToolEvent(tool=call.name, args=call.arguments, result=content, success=result.success, recovered=call.recovered)
        await conv.add(
            ChatMessage(role="tool", content=content, tool_call_id=call.id, name=call.name, meta=trace.meta())
        )
        if verdict is not None and verdict.run:
            await guard.finish(verdict, result.success, started)
        if result.success and result.metadata.get("is_image") and result.metadata.get("base64"):
            # The image goes to the model's context only, never to the display history.
            await conv.add(
                ChatMessage(role="user", content=f"[image from {call.name}]", images=[result.metadata["base64"]]),
                display=False,
            )

    async def _ask_owner(self, guard: RunGuard, verdict: Verdict, call: ToolCall) -> AsyncIterator[AgentEvent]:
        """approval_required, wait for the answer (or timeout, or Stop), approval_resolved."""
        approval_id = verdict.record.approval_id
        yield ApprovalRequired(approval_id=approval_id, tool=call.name, arguments=call.arguments, reason=verdict.reason)
        decision = await guard.wait(verdict, current_stop_event.get())
        remember = "session" if verdict.run and call.name in guard.grants else ""
        yield ApprovalResolved(approval_id=approval_id, decision=FRAME_DECISION[decision], remember=remember)
        if not verdict.run:
            verdict.refusal = _DECLINED.get(decision, _DECLINED["denied"]).format(tool=call.name)

    async def _execute(self, call: ToolCall, allowed: list[str], repair: bool) -> AsyncIterator[AgentEvent | ToolResult]:
        """Run the tool as a task, yielding the events it emits, then its ToolResult."""
        stop = current_stop_event.get()
        sink: asyncio.Queue = asyncio.Queue()
        token = current_event_sink.set(sink)
        try:
            task = asyncio.create_task(self.tools.call(call.name, call.arguments, allowed, repair=repair))
        finally:
            current_event_sink.reset(token)
        stop_wait = asyncio.create_task(stop.wait()) if stop is not None else None
        try:
            while not task.done():
                getter = asyncio.create_task(sink.get())
                waiting = {task, getter} | ({stop_wait} if stop_wait else set())
                done, _ = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
                if getter in done:
                    yield getter.result()
                else:
                    getter.cancel()
                if stop_wait is not None and stop_wait in done and not task.done():
                    task.cancel()  # the tool's own task (kills its subprocess), never the run
                    with contextlib.suppress(asyncio.CancelledError, Exception):
                        await task
                    break
            while not sink.empty():
                yield sink.get_nowait()
        finally:
            if stop_wait is not None:
                stop_wait.cancel()
        if task.cancelled():
            yield ToolResult(False, error="stopped by the owner before the tool finished")
        else:
            yield task.result()

    @staticmethod
    def _untrusted_source(call: ToolCall, result: ToolResult, conv: Conversation) -> str:
        """Where an outside result came from, when it must be marked as data ("" otherwise)."""
        if not result.success and not result.output:
            return ""
        chat = current_chat_session_id.get()
        uploads = str(session_files_dir(chat)) if chat else None
        return policy.untrusted_source(call.name, call.arguments, uploads, str(workspace_for(conv.owner_id)))

    async def _workers(self, registered, conv, profile, phase: str, limit: int = 0) -> list[AgentEvent]:
        if not registered:
            return []
        ctx = workers.WorkerContext(
            conversation=conv,
            profile=profile,
            backend=self.backends.get(profile.llm_backend),
            token_count=conv.token_count,
            max_tokens=limit or settings.OLLAMA_NUM_CTX,
            phase=phase,
        )
        return await workers.run_workers(registered, ctx)


# The tool result the model reads when the owner did not approve a call.
_DECLINED = {
    "denied": "the owner declined this {tool} call, so it was not run. Do not retry it; continue without "
    "it, or ask the owner what to do instead.",
    "timed_out": "nobody approved this {tool} call in time, so it was not run. Continue without it, or "
    "ask the owner to approve it when they are back.",
    "cancelled": "the run was stopped while this {tool} call waited for approval; it was not run.",
}


class _Turn:
    """What one LLM call produced."""

    def __init__(self) -> None:
        self.message = ChatMessage(role="assistant")
        self.calls: list[ToolCall] = []
        self.tokens = 0
        self.outcome = "ok"  # ok | stopped | error
        self.error = ""


async def _load_profile(profile_id: str) -> Profile:
    profile = await Profile.objects.filter(pk=profile_id).afirst()
    if profile is None:
        profile = await Profile.objects.order_by("id").afirst()
    if profile is None:
        raise RunFailed("no agent profiles exist; run `python manage.py migrate` to create the defaults")
    return profile
