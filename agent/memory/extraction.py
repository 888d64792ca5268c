"""Memory extraction's LLM side: a stale session's transcript → facts → the owner's summary.

memory_app finds the stale sessions, renders them and parses the answer; this module makes the
calls with the session profile's backend, upserts the facts, announces each new or changed one
as a `memory_saved` frame, regenerates the summary and marks the session extracted.
"""

from __future__ import annotations

import copy
import logging
from typing import Callable

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.conf import settings

from agent.frames.groups import frames_group, run_event
from agent.llm import LLMError, oneshot
from agent.llm.choice import choose_model
from agent.llm.messages import ChatMessage
from agent.registry import get_agent
from agent.trust import policy
from memory_app import services
from memory_app.extraction import (
    EXTRACTION_PROMPT,
    ExtractionResult,
    mark_extracted,
    parse_facts,
    render_session,
    stale_sessions,
)
from sessions_app.models import Message, Session

log = logging.getLogger(__name__)

SUMMARY_PROMPT = """You maintain an assistant's long-term memory about its user.
Below are facts about the user as `category: key = value` lines. Write a short narrative summary
(at most 12 sentences, plain text, third person: "The user ...") of who the user is, their
preferences, projects and environment. Only use the facts given; do not invent anything."""


class ExtractionPostponed(LLMError):
    """The owner started a turn: the extraction call gave way to it."""


def regenerate_summary(owner_id: int, backend, model: str) -> str:
    """Ask the LLM for a new narrative summary of all facts; store and return it.

    If the model fails, a plain list of the facts becomes the summary so the owner's memory
    still reaches the agent; the failure is logged.
    """
    facts, unverified = services.summary_facts(owner_id)  # unverified ones stay apart, marked
    if not facts:
        summary = services.with_unverified("", unverified)
        services.set_summary(owner_id, summary)
        return summary
    lines = services.facts_as_lines(sorted(facts, key=lambda f: (f.category, f.key)))
    try:
        summary = async_to_sync(oneshot.ask)(
            backend, oneshot.prompt(SUMMARY_PROMPT, lines), purpose="memory_summary", model=model,
            temperature=0.3, max_tokens=settings.LLM_MAX_SUMMARY_TOKENS,
        )
    except Exception as exc:
        log.warning("memory summary generation failed (%s); storing the fact list instead", exc)
        summary = ""
    summary = services.with_unverified(summary or services.listed(lines), unverified)
    services.set_summary(owner_id, summary)
    return summary


def extract_session(
    session: Session, *, dry_run: bool = False, notify: Callable | None = None, wrap_backend: Callable | None = None
) -> ExtractionResult:
    """Extract, upsert and summarise one session. Raises LLMError when the model fails (the
    session stays stale, so the next trigger retries it). `wrap_backend` may wrap the session's
    backend (the background job makes its calls low priority)."""
    result = ExtractionResult(session_id=str(session.pk))
    transcript = render_session(session)
    if "User:" not in transcript:
        result.skipped = "no user messages"
        if not dry_run:
            mark_extracted(session)
        return result
    choice = async_to_sync(choose_model)(get_agent().backends, copy.copy(session.profile), session.model)  # as its turns do
    backend, model = get_agent().backends.get(choice.backend), choice.model
    if wrap_backend is not None:
        backend = wrap_backend(backend)
    answer = async_to_sync(oneshot.ask)(
        backend, oneshot.prompt(EXTRACTION_PROMPT, f"Conversation:\n\n{transcript}"), purpose="extraction",
        model=model, temperature=0.2, max_tokens=settings.LLM_MAX_EXTRACTION_TOKENS,
    )
    parsed = parse_facts(answer)
    result.facts, result.malformed = parsed.facts, parsed.malformed
    if dry_run:
        return result
    untrusted = read_untrusted(session)  # facts from a chat that read outside content are unverified
    for category, key, value in parsed.facts:
        saved = services.upsert_fact(session.owner_id, category, key, value, source_session_id=session.pk,
                                     untrusted=untrusted)
        if saved.changed:
            result.saved += 1
            (notify or notify_memory_saved)(str(session.pk), saved.fact.as_dict())
    if result.saved or not services.get_summary(session.owner_id):
        regenerate_summary(session.owner_id, backend, model)
    mark_extracted(session)
    return result


def read_untrusted(session: Session) -> str:
    """What untrusted content the chat read (its first wrapped tool row), "" when none."""
    rows = Message.objects.filter(session=session, role="tool", content__startswith="[UNTRUSTED DATA ")
    first = rows.order_by("seq").values_list("content", flat=True).first()
    if first is None:
        return ""
    return policy.context_taint([ChatMessage(role="tool", content=first)]) or "untrusted content"


def extract_stale_sessions(
    owner_id: int | None = None,
    *,
    progress: Callable[[str], None] | None = None,
    notify: Callable | None = None,
    wrap_backend: Callable | None = None,
) -> int:
    """Process every stale session (of one owner, or all), one LLM call at a time; returns how
    many were processed. A postponed call (the owner started a turn) ends the pass."""
    done = 0
    for session in stale_sessions(owner_id=owner_id).select_related("profile"):
        try:
            result = extract_session(session, notify=notify, wrap_backend=wrap_backend)
        except ExtractionPostponed as exc:
            log.info("memory extraction postponed (%s); the stale sessions are retried on the next trigger", exc)
            break
        except Exception as exc:  # one failing session must not stop the others
            log.warning(
                "memory extraction of session %s did not finish: %s — the session stays stale and is "
                "retried the next time a session is created (or run `manage.py extract_memory`)",
                session.pk,
                exc,
            )
            continue
        done += 1
        if progress:
            progress(f"{session.pk}: {len(result.facts)} fact(s), {result.malformed} malformed line(s)")
    return done


def memory_saved_event(fact: dict) -> dict:
    """The channel-layer message announcing a saved fact (outside any run: no seq)."""
    return run_event({"type": "memory_saved", **fact})


def notify_memory_saved(session_id: str, fact: dict) -> None:
    """Tell the session's sockets about a fact saved outside a run (not part of any run's seq)."""
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        async_to_sync(layer.group_send)(frames_group(session_id), memory_saved_event(fact))
    except Exception:
        log.warning("could not announce memory_saved to session %s", session_id, exc_info=True)
