"""Every LLM request recorded (agent.LLMCall) with its purpose, so /debug can show how many
calls each user message cost and what each was for."""

from __future__ import annotations

import logging

from agent.models import LLMCall
from navi_project import hotsql, metrics
from navi_project.hop import db_hop
from tools_app.context import current_chat_session_id, current_run_id

log = logging.getLogger(__name__)


async def observe(call: dict) -> None:
    """LLMBackend.observer: store the call (one small INSERT as the call ends)."""
    metrics.llm_call(call)
    probe = call["purpose"] == "probe"  # about the server, not the message that happened to need it
    session_id = None if probe else current_chat_session_id.get()
    fields = dict(
        session_id=session_id if session_id and not str(session_id).startswith("subagent_") else None,
        run_id="" if probe else current_run_id.get(),
        purpose=call["purpose"][:32],
        backend=call["backend"][:32],
        model=str(call["model"])[:200],
        prompt_tokens=max(0, int(call.get("prompt_tokens") or 0)),
        completion_tokens=max(0, int(call.get("completion_tokens") or 0)),
        duration_ms=max(0, int(call.get("duration_ms") or 0)),
        outcome=call["outcome"][:16],
    )
    try:
        await db_hop(hotsql.insert, LLMCall, **fields)  # on every call: hot-path SQL
    except Exception:  # a deleted session, a locked database: bookkeeping only
        log.info("LLM call not recorded", exc_info=True)


async def for_session(session_id: str) -> list[dict]:
    """The session's calls grouped by run (one run = one user message), oldest first."""
    runs: dict[str, dict] = {}
    rows = LLMCall.objects.filter(session_id=session_id).order_by("created_at", "id")
    async for row in rows.values("run_id", "purpose", "model", "prompt_tokens", "completion_tokens", "duration_ms", "outcome", "created_at"):
        run = runs.setdefault(row["run_id"] or "-", {"run_id": row["run_id"], "calls": []})
        row["created_at"] = row["created_at"].isoformat()
        run["calls"].append(row)
    return list(runs.values())
