"""Fact extraction from stale sessions (seeds' memory.md).

A session is stale when it has been idle for STALE_AFTER and has not been extracted since its
last activity. Its display history is rendered as text, the session's own LLM extracts
`category: key = value` lines, the facts are upserted, the owner's summary is regenerated and
the session is marked. New or changed facts are announced to the session's sockets as
`memory_saved` frames.
"""

from __future__ import annotations

import logging
import re
import unicodedata
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Callable

from asgiref.sync import async_to_sync
from django.conf import settings
from django.db.models import F, OuterRef, Q, Subquery
from django.utils import timezone

from navi_project.llm_purpose import llm_purpose
from sessions_app.models import Message, Session

from . import services
from .models import CATEGORY_MAX, KEY_MAX, SessionMemoryState

log = logging.getLogger(__name__)

STALE_AFTER = timedelta(minutes=30)
MAX_TRANSCRIPT_CHARS = 24_000
EXTRACTION_PROMPT = """You extract long-term memory about the USER from a conversation between the user and an assistant.
Extract facts the user shared about themselves, their preferences, projects, and environment
(people, places, devices, tools, routines). Ignore the assistant's own statements, general knowledge
and one-off requests.

Answer ONLY with lines of the form
category: key = value
for example
preferences: editor = neovim
projects: navi = self-hosted AI agent written in Django
Use short lowercase categories (personal, preferences, projects, environment, people, routines, work).
If there is nothing worth remembering, answer exactly: NONE"""

_BULLET = re.compile(r"^\s*(?:[-*•·+>]+|\(?\d+[.)]|#+)\s*")
_FACT = re.compile(r"^(?P<category>[^:=]+?)\s*:\s*(?P<key>[^=]+?)\s*=\s*(?P<value>.+)$")
_QUOTES = "\"'`“”‘’«»"


@dataclass
class ParsedFacts:
    facts: list[tuple[str, str, str]] = field(default_factory=list)
    malformed: int = 0


@dataclass
class ExtractionResult:
    session_id: str
    facts: list[tuple[str, str, str]] = field(default_factory=list)
    saved: int = 0  # new or changed facts
    malformed: int = 0
    skipped: str = ""  # why nothing was extracted (no user messages, LLM error...)


def _clean(text: str) -> str:
    text = text.strip().strip("*_").strip()
    while len(text) >= 2 and text[0] in _QUOTES and text[-1] in _QUOTES:
        text = text[1:-1].strip()
    return text.strip(_QUOTES + " ").strip()


def parse_facts(text: str) -> ParsedFacts:
    """`category: key = value` lines → facts; bullets, numbering, bold and quotes are tolerated.

    Blank lines and NONE are ignored; anything else that does not parse is counted as malformed.
    A key repeated in one answer keeps its last value.
    """
    out = ParsedFacts()
    found: dict[tuple[str, str], str] = {}
    for raw in unicodedata.normalize("NFC", text or "").splitlines():
        line = _BULLET.sub("", raw.replace("\u00a0", " ")).strip()
        line = line.strip("*_`").strip()
        if not line or line.strip(".").upper() in ("NONE", "NONE."):
            continue
        match = _FACT.match(line)
        if match is None:
            out.malformed += 1
            continue
        category = services.normalise_label(_clean(match["category"]))
        key = services.normalise_label(_clean(match["key"]))
        value = " ".join(_clean(match["value"]).split())
        if not category or not key or not value or len(category) > CATEGORY_MAX or len(key) > KEY_MAX:
            out.malformed += 1
            continue
        found.pop((category, key), None)  # a later duplicate wins and moves to the end
        found[(category, key)] = value
    out.facts = [(c, k, v) for (c, k), v in found.items()]
    return out


def stale_sessions(now=None, owner_id: int | None = None, include_fresh: bool = False):
    """Sessions idle for STALE_AFTER and not extracted since their last activity."""
    now = now or timezone.now()
    rows = Session.objects.all()
    if owner_id is not None:
        rows = rows.filter(owner_id=owner_id)
    if include_fresh:
        return rows.order_by("last_active")
    extracted = SessionMemoryState.objects.filter(session=OuterRef("pk")).values("extracted_at")[:1]
    return (
        rows.filter(last_active__lt=now - STALE_AFTER)
        .annotate(extracted_at=Subquery(extracted))
        .filter(Q(extracted_at__isnull=True) | Q(extracted_at__lt=F("last_active")))
        .order_by("last_active")
    )


def render_session(session: Session) -> str:
    """The display history as plain text (tool output shortened), capped to the most recent part."""
    lines = []
    for row in Message.objects.filter(session=session, in_display=True).order_by("seq"):
        if row.role == "user":
            lines.append(f"User: {row.content}")
        elif row.role == "assistant" and row.content and row.name != "plan":
            lines.append(f"Assistant: {row.content}")
        elif row.role == "tool":
            lines.append(f"Tool result ({row.name}): {row.content[:300]}")
    text = "\n\n".join(lines)
    if len(text) > MAX_TRANSCRIPT_CHARS:
        text = "[…earlier messages omitted…]\n" + text[-MAX_TRANSCRIPT_CHARS:]
    return text


def _backend_and_model(session: Session):
    from agent.registry import get_agent

    profile = session.profile
    return get_agent().backends.get(profile.llm_backend), profile.resolved_model()


def _mark(session: Session) -> None:
    SessionMemoryState.objects.update_or_create(session=session, defaults={"extracted_at": timezone.now()})


def extract_session(
    session: Session, *, dry_run: bool = False, notify: Callable | None = None, wrap_backend: Callable | None = None
) -> ExtractionResult:
    """Extract, upsert and summarise one session. Raises LLMError when the model fails (the
    session stays stale, so the next trigger retries it). `wrap_backend` may wrap the session's
    backend (the background job makes its calls low priority)."""
    from agent.messages import ChatMessage

    result = ExtractionResult(session_id=str(session.pk))
    transcript = render_session(session)
    if "User:" not in transcript:
        result.skipped = "no user messages"
        if not dry_run:
            _mark(session)
        return result
    backend, model = _backend_and_model(session)
    if wrap_backend is not None:
        backend = wrap_backend(backend)
    messages = [
        ChatMessage(role="system", content=EXTRACTION_PROMPT),
        ChatMessage(role="user", content=f"Conversation:\n\n{transcript}"),
    ]
    with llm_purpose("extraction"):
        response = async_to_sync(backend.complete)(
            messages, None, model=model, temperature=0.2, think=False, max_tokens=settings.LLM_MAX_EXTRACTION_TOKENS
        )
    parsed = parse_facts(response.content)
    result.facts, result.malformed = parsed.facts, parsed.malformed
    if dry_run:
        return result
    for category, key, value in parsed.facts:
        saved = services.upsert_fact(session.owner_id, category, key, value, source_session_id=session.pk)
        if saved.changed:
            result.saved += 1
            (notify or notify_memory_saved)(str(session.pk), saved.fact.as_dict())
    if result.saved or not services.get_summary(session.owner_id):
        services.regenerate_summary(session.owner_id, backend, model)
    _mark(session)
    return result


def extract_stale_sessions(
    owner_id: int | None = None,
    *,
    progress: Callable[[str], None] | None = None,
    notify: Callable | None = None,
    wrap_backend: Callable | None = None,
) -> int:
    """Process every stale session (of one owner, or all), one LLM call at a time; returns how
    many were processed. A postponed call (the owner started a turn) ends the pass."""
    from memory_app.background import ExtractionPostponed

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


def notify_memory_saved(session_id: str, fact: dict) -> None:
    """Tell the session's sockets about a fact saved outside a run (not part of any run's seq)."""
    from channels.layers import get_channel_layer

    from agent.runs import frames_group

    layer = get_channel_layer()
    if layer is None:
        return
    frame = {"type": "memory_saved", **fact}
    try:
        async_to_sync(layer.group_send)(frames_group(session_id), {"type": "run.event", "frame": frame})
    except Exception:
        log.warning("could not announce memory_saved to session %s", session_id, exc_info=True)
