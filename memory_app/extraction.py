"""What fact extraction works on: stale sessions, their transcript, and the model's answer.

A session is stale when it has been idle for STALE_AFTER and has not been extracted since its
last activity. The LLM call itself, the upserts and the `memory_saved` frames are the agent's
job (agent.memory.extraction): every LLM call is made from agent/.
"""

from __future__ import annotations

import logging
import re
import unicodedata
from dataclasses import dataclass, field
from datetime import timedelta

from django.db.models import F, OuterRef, Q, Subquery
from django.utils import timezone

from sessions_app.models import Message, Session
from sessions_app.transcript import render_transcript

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
    rows = Message.objects.filter(session=session, in_display=True).order_by("seq")
    text = render_transcript((r for r in rows if not (r.role == "assistant" and r.name == "plan")), separator="\n\n")
    if len(text) > MAX_TRANSCRIPT_CHARS:
        text = "[…earlier messages omitted…]\n" + text[-MAX_TRANSCRIPT_CHARS:]
    return text


def mark_extracted(session: Session) -> None:
    SessionMemoryState.objects.update_or_create(session=session, defaults={"extracted_at": timezone.now()})
