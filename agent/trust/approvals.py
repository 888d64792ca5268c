"""Who may run a tool call, and the owner's approval when the policy says `ask`.

A `RunGuard` is the state one run (and its sub-agents) shares: the user, whether they hold
`run_host_tools`, the approvals remembered for the chat, and whether untrusted content has
entered the run. Every call is recorded (`ToolCallRecord`); a pending approval is such a row,
answered by a conditional UPDATE from any socket, worker or REST client, then announced on
the run's control group so the waiting run wakes at once (it also re-reads the row every
second, so a lost message only costs a moment).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from channels.layers import get_channel_layer
from django.conf import settings
from django.utils import timezone

from agent.frames import notices
from agent.frames.groups import control_group
from agent.models import SessionToolGrant, ToolCallRecord
from agent.trust import policy
from navi_project import hotsql
from navi_project.hop import db_hop
from sessions_app.models import Message
from tools_app.context import current_approval_timeout_s, current_user_id
from tools_app.egress import hosts_in
from tools_app.permissions import is_host_call, offered_without_permission, refusal, user_has_host_tools
from tools_app.registry import ToolRegistry

Decision = ToolCallRecord.Decision
POLL_S = 1.0
# What the approval_resolved frame says for each final decision.
FRAME_DECISION = {
    Decision.APPROVED: "approve",
    Decision.DENIED: "deny",
    Decision.TIMED_OUT: "timeout",
    Decision.CANCELLED: "stopped",
}

current_guard: ContextVar["RunGuard | None"] = ContextVar("current_guard", default=None)
_waiting: dict[str, asyncio.Future] = {}  # approval id -> the future a run in this process awaits


class ApprovalNotFound(LookupError):
    """No approval with that id in this session."""


class ApprovalAlreadyAnswered(RuntimeError):
    """The approval was answered, timed out or cancelled already."""


@dataclass
class Verdict:
    """What to do with one call: run it, refuse it (`refusal` is the model's tool result) or ask."""

    record: ToolCallRecord
    run: bool = False
    ask: bool = False
    refusal: str = ""
    reason: str = ""


async def _record(record: ToolCallRecord, verdict: Verdict, granted: bool) -> None:
    """Save the call with its decision (pending approvals get their id here)."""
    record.reason = verdict.reason
    if verdict.ask:
        record.decision = Decision.PENDING
        record.approval_id = uuid.uuid4().hex
    elif verdict.run:
        record.decision = Decision.APPROVED if granted else Decision.ALLOWED
    else:
        record.decision = Decision.REFUSED
    await record.asave()


@dataclass
class RunGuard:
    user_id: int | None
    session_id: str | None  # the chat session (sub-agents share their parent's)
    run_id: str = ""
    can_host: bool = False
    grants: set[str] = field(default_factory=set)
    # The chat's conversation: untrusted rows in its context taint every run while they stay.
    conversation: Any = None
    # Untrusted content a sub-agent read in this run (its own context is gone when it ends), or
    # where the run's own instruction came from (a routine made in a tainted chat).
    run_taint: str = ""
    # The run's instruction itself is untrusted: hosts in the chat's messages are not the owner's.
    tainted_from_start: bool = False
    _owner_hosts: set[str] | None = None  # hosts the owner named in this chat, read when needed

    @classmethod
    async def for_run(cls, user_id: int | None, session_id: str | None, run_id: str = "") -> "RunGuard":
        return await db_hop(cls.load, user_id, session_id, run_id)  # one thread hop

    @classmethod
    def load(cls, user_id: int | None, session_id: str | None, run_id: str, conversation: Any = None) -> "RunGuard":
        grants: set[str] = set()
        if _is_chat(session_id):
            grants = {row[0] for row in hotsql.values(
                f"SELECT tool FROM {hotsql.table(SessionToolGrant)} WHERE session_id = %s",
                [hotsql.prep(SessionToolGrant, "session", session_id)],
            )}
        return cls(user_id, session_id, run_id, user_has_host_tools(user_id), grants=grants, conversation=conversation)

    @property
    def tainted_by(self) -> str:
        """The untrusted source the model still has in view ("" when none)."""
        if self.run_taint:
            return self.run_taint
        return policy.context_taint(self.conversation.context) if self.conversation is not None else ""

    async def known_hosts(self) -> set[str]:
        """Hosts a request may reach after untrusted content without asking: named by the owner
        in this chat, or seen in the context before the untrusted content arrived."""
        if self.tainted_from_start:
            return set()
        if self._owner_hosts is None:
            self._owner_hosts = await db_hop(_owner_hosts, self.session_id)
        seen = policy.hosts_before_taint(self.conversation.context) if self.conversation is not None else set()
        return self._owner_hosts | seen

    # --- what the model is offered ----------------------------------------------------------
    def offers(self, tool: str, profile_policy: dict | None) -> bool:
        if policy.configured(profile_policy, tool) == policy.DENY:
            return False
        return self.can_host or offered_without_permission(tool)

    # --- one call -------------------------------------------------------------------------
    def _record_for(self, tool: str, arguments: Any, profile_id: str, is_subagent: bool) -> ToolCallRecord:
        return ToolCallRecord(
            user_id=self.user_id,
            session_id=self.session_id if _is_chat(self.session_id) else None,
            run_id=self.run_id,
            profile_id=profile_id or "",
            tool=tool[:100],
            arguments=arguments if isinstance(arguments, dict) else {"raw": arguments},
            is_subagent=is_subagent,
        )

    async def refuse_bad_call(self, tool: str, arguments: Any, profile_id: str, problem: str, *, is_subagent: bool) -> None:
        """Record a call that could not be read or validated: it never reaches the policy or runs."""
        record = self._record_for(tool, arguments, profile_id, is_subagent)
        await _record(record, Verdict(record, reason=f"bad call: {problem}"[:2000]), False)

    async def check(
        self, tool: str, arguments: dict, profile_id: str, profile_policy: dict | None, *, is_subagent: bool,
        destinations: list[str] | None = None, tool_asks: str = "", tool_default: str | None = None,
    ) -> Verdict:
        """Decide on a prepared call (its arguments validated and normalised once, by
        ToolRegistry.prepare) and record it. Refusals and `ask` never run the tool until answered.
        `destinations`: the URLs or hosts the call would contact (tools_app.egress); `tool_asks`:
        the tool's own reason to ask for this call (Tool.approval_reason); `tool_default`: the
        Tool's own default policy (MCP tools ask until allowed)."""
        record = self._record_for(tool, arguments, profile_id, is_subagent)
        setting = policy.policy_for(profile_policy, tool, arguments, tool_default)
        tainted_by = self.tainted_by
        new_hosts = policy.unknown_hosts(destinations, await self.known_hosts()) if tainted_by and destinations else []
        if is_host_call(tool, arguments) and not self.can_host:
            verdict = Verdict(record, refusal=refusal(tool), reason="no run_host_tools permission")
        elif setting == policy.DENY:
            verdict = Verdict(
                record,
                refusal=f"refused: this profile's policy does not allow '{tool}'. Do not retry; answer without it "
                "or tell the user the owner can change the policy in the admin (Profiles → tool policy).",
                reason="the profile's policy denies it",
            )
        elif tool_asks:  # the tool's own reason (a routine's run changing routines)
            verdict = Verdict(record, ask=True, reason=tool_asks)
        elif tainted_by and tool in policy.ASK_AFTER_TAINT:  # it would outlive this chat's taint
            verdict = Verdict(record, ask=True, reason=policy.taint_reason(tool, arguments, tainted_by))
        elif tainted_by and policy.is_risky(tool, arguments):
            verdict = Verdict(record, ask=True, reason=policy.ask_reason(tool, arguments, tainted_by=tainted_by))
        elif new_hosts:  # a request to a new host could carry chat data out (an exfiltration)
            verdict = Verdict(record, ask=True, reason=policy.exfil_reason(tool, new_hosts, tainted_by))
        elif setting == policy.ASK and tool in self.grants:
            verdict = Verdict(record, run=True, reason="approved for this chat earlier (always in this chat)")
        elif setting == policy.ASK:
            by_policy = policy.configured(profile_policy, tool) == policy.ASK and not policy.is_risky(tool, arguments)
            reason = policy.ask_reason(tool, arguments, by_policy=by_policy)
            if not policy.configured(profile_policy, tool) and tool_default == policy.ASK:
                reason = policy.ask_reason_by_default(tool)
            verdict = Verdict(record, ask=True, reason=reason)
        else:
            verdict = Verdict(record, run=True, reason="allowed by the policy")
        granted = tool in self.grants and setting == policy.ASK
        await _record(record, verdict, granted)
        return verdict

    async def wait(self, verdict: Verdict, stop: asyncio.Event | None) -> str:
        """Wait for the owner's answer (or the timeout, or Stop); returns the final Decision."""
        record = verdict.record
        future: asyncio.Future = asyncio.get_running_loop().create_future()
        _waiting[record.approval_id] = future
        if _is_chat(self.session_id):
            notices.approval_waiting(self.session_id, self.user_id, record.tool, verdict.reason)
        timeout = current_approval_timeout_s.get()  # a routine's unattended run waits longer
        deadline = time.monotonic() + float(settings.APPROVAL_TIMEOUT_S if timeout is None else timeout)
        try:
            while True:
                decision = await _settled(record.pk)
                if decision:
                    break
                left = deadline - time.monotonic()
                if left <= 0:
                    decision = await _settle(record, Decision.TIMED_OUT)
                    break
                if stop is not None and stop.is_set():
                    decision = await _settle(record, Decision.CANCELLED)
                    break
                await _first_of(future, stop, min(POLL_S, left))
        finally:
            _waiting.pop(record.approval_id, None)
        if decision == Decision.APPROVED:
            verdict.run = True
            if await SessionToolGrant.objects.filter(session_id=record.session_id, tool=record.tool).aexists():
                self.grants.add(record.tool)
        return decision

    async def outcome(self, verdict: Verdict, resolved: Any) -> dict[str, Any]:
        """How an approval ended, for the tool row's meta: the decision as the frame said it, who
        answered (none on a timeout or a stop) and when, and why it asked."""
        answered = await ToolCallRecord.objects.filter(pk=verdict.record.pk).values_list("decided_by__username", flat=True).afirst()
        return {
            "decision": resolved.decision, "remember": resolved.remember, "reason": verdict.reason[:500],
            "by": answered or "", "at": timezone.now().isoformat(),
        }

    async def finish(self, verdict: Verdict, success: bool, started: float) -> None:
        """Record the outcome of a call that ran."""
        await ToolCallRecord.objects.filter(pk=verdict.record.pk).aupdate(
            success=success, duration_ms=int((time.monotonic() - started) * 1000)
        )

    def start_tainted(self, source: str) -> None:
        """The run's instruction came from untrusted content (a routine made in a tainted chat):
        every network request to a host asks, and so does everything that asks after taint."""
        self.run_taint = source
        self.tainted_from_start = True

    def taint(self, source: str) -> None:
        """Untrusted content entered a context that is not the chat's (a sub-agent's)."""
        if not self.run_taint:
            self.run_taint = source


def offered_tools(tools: ToolRegistry, profile: Any) -> list:
    """The profile's tools this user may be offered (no host tools without the permission,
    nothing the policy denies)."""
    guard = current_guard.get()
    user_id = guard.user_id if guard is not None else current_user_id.get()
    found = tools.tools_for(profile.enabled_tools, user_id, profile.id)
    if guard is None:
        return found
    return [t for t in found if guard.offers(t.name, profile.tool_policy)]


def _owner_hosts(session_id: str | None) -> set[str]:
    """Hosts named in the owner's own messages of this chat (compressed ones too)."""
    if not _is_chat(session_id):
        return set()
    rows = hotsql.values(
        f"SELECT content FROM {hotsql.table(Message)} WHERE session_id = %s AND role = %s AND is_summary = %s "
        "AND in_display = %s",
        [hotsql.prep(Message, "session", session_id), "user", False, True],
    )
    # An attached MCP resource is in the row too, but its hosts are not the owner's words.
    return {host for (content,) in rows for host in hosts_in(policy.without_untrusted(content or ""))}


def _is_chat(session_id: str | None) -> bool:
    return bool(session_id) and not str(session_id).startswith("subagent_")


async def _first_of(future: asyncio.Future, stop: asyncio.Event | None, timeout: float) -> None:
    waiters = [asyncio.ensure_future(asyncio.shield(future))]
    if stop is not None:
        waiters.append(asyncio.ensure_future(stop.wait()))
    try:
        await asyncio.wait(waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()


async def _settled(record_pk: int) -> str | None:
    decision = await ToolCallRecord.objects.filter(pk=record_pk).values_list("decision", flat=True).afirst()
    return None if decision in (None, Decision.PENDING) else decision


async def _settle(record: ToolCallRecord, decision: str) -> str:
    """Close a pending approval ourselves (timeout, stop) unless an answer won the race."""
    updated = await ToolCallRecord.objects.filter(pk=record.pk, decision=Decision.PENDING).aupdate(
        decision=decision, decided_at=timezone.now()
    )
    return decision if updated else (await _settled(record.pk) or decision)


# --- answering, from a socket or REST -------------------------------------------------------
async def answer(session_id: str, approval_id: Any, decision: Any, remember: Any = None, user_id: int | None = None) -> str:
    """Record the owner's answer and wake the run; returns the frame decision (approve/deny)."""
    if decision not in ("approve", "deny"):
        raise ValueError('decision must be "approve" or "deny"')
    if remember not in (None, "", "session"):
        raise ValueError('remember must be "session" (approve for the rest of this chat) or left out')
    if not isinstance(approval_id, str) or not approval_id:
        raise ApprovalNotFound("approval_id is required")
    final = Decision.APPROVED if decision == "approve" else Decision.DENIED
    rows = ToolCallRecord.objects.filter(approval_id=approval_id, session_id=session_id)
    updated = await rows.filter(decision=Decision.PENDING).aupdate(
        decision=final, decided_by_id=user_id, decided_at=timezone.now()
    )
    if not updated:
        row = await rows.values("decision").afirst()
        if row is None:
            raise ApprovalNotFound(f"no approval '{approval_id}' in this session")
        raise ApprovalAlreadyAnswered(
            f"approval '{approval_id}' is already closed ({row['decision']}); nothing to answer"
        )
    if remember == "session" and final == Decision.APPROVED:
        tool = await rows.values_list("tool", flat=True).afirst()
        await SessionToolGrant.objects.aget_or_create(session_id=session_id, tool=tool)
    await notify(session_id, approval_id, final)
    return FRAME_DECISION[final]


async def notify(session_id: str, approval_id: str, decision: str) -> None:
    """Wake the waiting run: directly in this process, through the control group elsewhere."""
    if wake(approval_id, decision):
        return
    with contextlib.suppress(Exception):  # the run also re-reads the row every POLL_S
        await get_channel_layer().group_send(
            control_group(session_id), {"type": "run.approval", "approval_id": approval_id, "decision": decision}
        )


def wake(approval_id: str, decision: str) -> bool:
    future = _waiting.get(approval_id)
    if future is None:
        return False
    if not future.done():
        future.set_result(decision)
    return True
