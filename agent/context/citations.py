"""The sources an answer drew on: the passages this turn's searches returned (a tool row's
`meta["sources"]`, knowledge_search's), narrowed to those the answer names when it names any.

The model is asked to cite "(notes.md, section “Travel”)", but a small model often does not:
the sources are taken from what the tools returned, never from the answer's words alone, so
the page's chips show what the answer was written from either way.
"""

from __future__ import annotations

from typing import Any

from agent.llm.messages import ChatMessage

MAX_SOURCES = 8
NAME_MAX = 255
WHERE_MAX = 200
QUERY_MAX = 200  # the search's words, marked in the passage a chip opens
MIN_STEM = 4  # "notes" in an answer names notes.md; "a" would name everything


def cited_sources(context: list[ChatMessage], answer: str) -> list[dict[str, Any]]:
    """The turn's sources (after its request), those the answer names first-and-only when it
    names any, each passage once, at most MAX_SOURCES."""
    request = max((i for i, m in enumerate(context) if m.role == "user" and not m.is_summary), default=-1)
    found: dict[int, dict[str, Any]] = {}
    for message in context[request + 1:]:
        if message.role != "tool":
            continue
        for raw in (message.meta or {}).get("sources") or []:
            source = clean(raw)
            if source is not None and source["passage_id"] not in found:
                found[source["passage_id"]] = source
    text = answer.casefold()
    named = [s for s in found.values() if _names_document(s, text)]
    if not named:
        return list(found.values())[:MAX_SOURCES]
    return _located(named, text)[:MAX_SOURCES]


def clean(raw: Any) -> dict[str, Any] | None:
    """A source as stored and sent to the page (any tool may put `sources` in its metadata:
    only these fields, bounded, pass)."""
    if not isinstance(raw, dict):
        return None
    passage_id, document_id = raw.get("passage_id"), raw.get("document_id")
    if not isinstance(passage_id, int) or isinstance(passage_id, bool) or passage_id <= 0 or not isinstance(document_id, str):
        return None
    location = raw.get("location") if isinstance(raw.get("location"), dict) else {}
    return {
        "passage_id": passage_id,
        "document_id": document_id[:64],
        "name": str(raw.get("name") or "")[:NAME_MAX],
        "where": str(raw.get("where") or "")[:WHERE_MAX],
        "location": {k: v for k, v in location.items()
                     if k in ("page", "heading", "line", "section") and isinstance(v, (int, str)) and len(str(v)) <= WHERE_MAX},
        **({"query": raw["query"][:QUERY_MAX]} if isinstance(raw.get("query"), str) and raw["query"] else {}),
    }


def _names_document(source: dict[str, Any], text: str) -> bool:
    name = source["name"].casefold()
    stem = name.rsplit(".", 1)[0]
    return bool(name) and (name in text or (len(stem) >= MIN_STEM and stem in text))


def _located(named: list[dict[str, Any]], text: str) -> list[dict[str, Any]]:
    """Of a named document's passages, those whose place (heading, page) the answer names too;
    all of them when it names none."""
    kept: list[dict[str, Any]] = []
    for document_id in dict.fromkeys(s["document_id"] for s in named):
        group = [s for s in named if s["document_id"] == document_id]
        located = [s for s in group if _names_place(s["location"], text)]
        kept += located or group
    return kept


def _names_place(location: dict[str, Any], text: str) -> bool:
    heading = str(location.get("heading") or "").casefold()
    page = location.get("page")
    return bool(heading and heading in text) or bool(page and f"page {page}" in text)
