"""One tool call of the loop: check it (permission, policy, the owner's approval), run it while
forwarding what it emits, and append its result to the conversation."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import AsyncIterator

from agent.context.conversation import Conversation
from agent.frames.events import AgentEvent, ApprovalRequired, ApprovalResolved, ToolEvent, ToolStarted
from agent.llm.messages import ChatMessage, ToolCall
from agent.models import Profile
from agent.toolcalling.calls import CallTracker
from agent.toolcalling.guards import ledger
from agent.toolcalling.tool_trace import ToolTrace
from agent.trust import policy
from agent.trust.approvals import FRAME_DECISION, RunGuard, Verdict, current_guard
from navi_project import metrics
from sessions_app.services import session_files_dir
from tools_app import egress
from tools_app.base import ToolResult
from tools_app.context import (
    current_chat_session_id,
    current_event_sink,
    current_repair_fired,
    current_repairs,
    current_stop_event,
    current_taint,
)
from tools_app.registry import PreparedCall, ToolRegistry
from tools_app.workspace import workspace_for

# The tool result the model reads when the owner did not approve a call.
DECLINED = {
    "denied": "the owner declined this {tool} call, so it was not run. Do not retry it; continue without "
    "it, or ask the owner what to do instead.",
    "timed_out": "nobody approved this {tool} call in time, so it was not run. Continue without it, or "
    "ask the owner to approve it when they are back.",
    "cancelled": "the run was stopped while this {tool} call waited for approval; it was not run.",
}


async def run_tool(
    tools: ToolRegistry, conv: Conversation, call: ToolCall, allowed: list[str], profile: Profile,
    is_subagent: bool, tracker: CallTracker,
) -> AsyncIterator[AgentEvent]:
    """tool_started, approval frames when asked, what the tool emits, then tool_call."""
    # Read and validated once: the frames, the policy, the permission check and the tool all
    # see this one normalised object ("Write" is "write" for every one of them).
    prepared = tools.prepare(call.name, call.arguments, repair=profile.repair_arguments, offered=allowed)
    call.arguments = prepared.params
    yield ToolStarted(tool=call.name, args=call.arguments, recovered=call.recovered)
    if repeat := tracker.repeat_note(call):
        yield ToolEvent(tool=call.name, args=call.arguments, result=repeat, success=False, recovered=call.recovered)
        await conv.add(ChatMessage(role="tool", content=repeat, tool_call_id=call.id, name=call.name))
        return
    guard = current_guard.get()
    verdict, result, approval = None, prepared.problem, None
    if result is not None:  # a bad call never reaches the policy and never runs
        if guard is not None:
            await guard.refuse_bad_call(call.name, call.arguments, profile.id, result.error or "", is_subagent=is_subagent)
    elif guard is not None:
        verdict = await guard.check(
            call.name, prepared.params, profile.id, profile.tool_policy, is_subagent=is_subagent,
            destinations=egress.destinations(prepared.tool, prepared.params),
            tool_asks=prepared.tool.approval_reason(prepared.params) if prepared.tool is not None else "",
            tool_default=getattr(prepared.tool, "default_policy", None),
        )
        if verdict.ask:
            async for event in _ask_owner(guard, verdict, call):
                if isinstance(event, ApprovalResolved):
                    approval = await guard.outcome(verdict, event)  # kept on the tool row for the history
                yield event
        if not verdict.run:
            result = ToolResult(False, error=verdict.refusal)
    started, trace = time.monotonic(), ToolTrace(approval)
    taint_before = guard.run_taint if guard is not None else ""
    if result is None:
        taint = current_taint.set(guard.tainted_by if guard is not None else "")  # stored with what the tool writes
        repairs = current_repairs.set(ledger.active(profile))  # a tool's own small-model repairs (dates)
        counted = current_repair_fired.set(ledger.fired)  # and where they say they acted
        try:
            async for item in _execute(tools, prepared, allowed):
                if isinstance(item, ToolResult):
                    result = item
                else:
                    trace.note(item)
                    yield item
        finally:
            with contextlib.suppress(ValueError):  # closed from another task's context: nothing to undo
                current_taint.reset(taint)
            with contextlib.suppress(ValueError):
                current_repairs.reset(repairs)
            with contextlib.suppress(ValueError):
                current_repair_fired.reset(counted)
    content = _content(call, prepared, result, conv, guard, taint_before) + tracker.after(call, result)
    trace.note_result(result)
    yield ToolEvent(tool=call.name, args=call.arguments, result=content, success=result.success, recovered=call.recovered)
    await conv.add(ChatMessage(role="tool", content=content, tool_call_id=call.id, name=call.name, meta=trace.meta()))
    if verdict is not None and verdict.run:
        await guard.finish(verdict, result.success, started)
    metrics.tool_call(call.name, call.name in allowed, verdict, result.success)
    if result.success and result.metadata.get("is_image") and result.metadata.get("base64"):
        # The image goes to the model's context only, never to the display history.
        image = ChatMessage(role="user", content=f"[image from {call.name}]", images=[result.metadata["base64"]])
        await conv.add(image, display=False)


async def _ask_owner(guard: RunGuard, verdict: Verdict, call: ToolCall) -> AsyncIterator[AgentEvent]:
    """approval_required, wait for the answer (or timeout, or Stop), approval_resolved."""
    approval_id = verdict.record.approval_id
    yield ApprovalRequired(approval_id=approval_id, tool=call.name, arguments=call.arguments, reason=verdict.reason)
    decision = await guard.wait(verdict, current_stop_event.get())
    remember = "session" if verdict.run and call.name in guard.grants else ""
    yield ApprovalResolved(approval_id=approval_id, decision=FRAME_DECISION[decision], remember=remember)
    if not verdict.run:
        verdict.refusal = DECLINED.get(decision, DECLINED["denied"]).format(tool=call.name)


async def _execute(tools: ToolRegistry, prepared: PreparedCall, allowed: list[str]) -> AsyncIterator[AgentEvent | ToolResult]:
    """Run the tool as a task, yielding the events it emits, then its ToolResult."""
    stop = current_stop_event.get()
    sink: asyncio.Queue = asyncio.Queue()
    token = current_event_sink.set(sink)
    try:
        task = asyncio.create_task(tools.run(prepared, allowed))
    finally:
        current_event_sink.reset(token)
    stop_wait = asyncio.create_task(stop.wait()) if stop is not None else None
    try:
        while not task.done():
            getter = asyncio.create_task(sink.get())
            done, _ = await asyncio.wait({task, getter} | ({stop_wait} if stop_wait else set()),
                                         return_when=asyncio.FIRST_COMPLETED)
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
    yield ToolResult(False, error="stopped by the owner before the tool finished") if task.cancelled() else task.result()


def _content(
    call: ToolCall, prepared: PreparedCall, result: ToolResult, conv: Conversation, guard: RunGuard | None, taint_before: str
) -> str:
    """The result as the model reads it; outside data is marked as such. In the chat's context
    the mark itself keeps the chat tainted; elsewhere (a sub-agent) the run is tainted."""
    content = result.to_message_content()
    if not result.success and not result.output:
        return content
    chat = current_chat_session_id.get()
    uploads = str(session_files_dir(chat)) if chat else None
    tool = prepared.tool
    source = policy.untrusted_source(
        call.name, call.arguments, uploads, str(workspace_for(conv.owner_id)),
        network=tool is not None and egress.reaches_network(tool),
        origin=(tool.origin or tool.name) if tool is not None and tool.untrusted_output else "",
    )
    if not source and result.metadata.get("untrusted_source"):
        # Stored earlier while untrusted content was in view (notes, an unconfirmed memory fact).
        source = f"{call.name} output written after reading {result.metadata['untrusted_source']}"[:1000]
    if not source and guard is not None and guard.run_taint and guard.run_taint != taint_before:
        # A sub-agent read outside data during this call: its answer is made of that data.
        source = f"an answer written after reading {guard.run_taint}"
    if source:
        content = policy.wrap_untrusted(content, source)
        if guard is not None and conv is not guard.conversation:
            guard.taint(source)
    if result.success and (note := result.metadata.get("cite_note")):
        content = f"{content}\n{note}"  # the tool's own words, after (outside) the data it returned
    return content
