"""`knowledge_search`: the owner's documents, found by meaning and by words, for the agent.

Registered with the process-wide tool registry from KnowledgeConfig.ready. It acts for the
run's user (`current_user_id`), so a sub-agent or an /mcp turn sees that user's documents
only. What documents say is not the owner speaking: the results are marked untrusted
(`untrusted_output`), like a web page, and risky calls after them ask first.
"""

from __future__ import annotations

from typing import Any

from asgiref.sync import sync_to_async

from tools_app.base import Tool, ToolResult
from tools_app.context import current_user_id
from tools_app.toolset import register_app_tools

from . import search

TEXT_MAX = 1200  # characters of each passage shown
QUERY_MAX = 200  # characters of the query kept with each source (the passage dialog marks its words)
# Read by the model after the passages, outside their untrusted block (it names no document:
# an uploaded file's name is not the owner speaking).
CITE_NOTE = (
    "When you use one of these passages, name its source in parentheses after the sentence as it is "
    "cited above, e.g. (models.txt › Field options › null) or (report.pdf, page 3)."
)


def describe(location: dict) -> str:
    """Where a passage is in its document: "Field options › null (line 120)", "page 4",
    "line 12" (a passage indexed before sections were kept: "section “Travel”")."""
    section = str(location.get("section") or "")
    line = location.get("line") if not location.get("page") else None
    if section:
        where = section + (f" (line {line})" if line else "")
        return f"page {location['page']}, {where}" if location.get("page") else where
    parts = []
    if location.get("page"):
        parts.append(f"page {location['page']}")
    if location.get("heading"):
        parts.append(f"section “{location['heading']}”")
    if line:
        parts.append(f"line {line}")
    return ", ".join(parts)


def cite(name: str, location: dict) -> str:
    """A passage's citation: "models.txt › Field options › null (line 120)", "report.pdf, page 4"."""
    where = describe(location)
    if not where:
        return name
    return f"{name} › {where}" if location.get("section") and not location.get("page") else f"{name}, {where}"


class KnowledgeSearchTool(Tool):
    name = "knowledge_search"
    keywords = "document documents file pdf knowledge notes manual uploaded says contract policy find look up"
    examples = (
        "what does my rental agreement say about pets?",
        "search my uploaded documents for the warranty period",
        "according to the manual I uploaded, how do I reset the router?",
        "find the passage about holidays in the employee handbook",
    )
    description = (
        "Search the documents the user uploaded to Navi's Knowledge page (by meaning and by words). "
        "Returns passages, each with its citation (document name and section, or page); give that citation "
        "when you use one in an answer."
    )
    parameters = {
        "type": "object",
        "properties": {
            "query": {"type": "string", "minLength": 1, "maxLength": 2000},
            "k": {"type": "integer", "minimum": 1, "maximum": 20, "default": 5},
        },
        "required": ["query"],
    }
    untrusted_output = True
    origin = "the owner's uploaded documents"

    async def execute(self, params: dict[str, Any]) -> ToolResult:
        owner = current_user_id.get()
        if owner is None:
            return ToolResult(False, error="no user for this run: knowledge_search only works inside a chat run")
        query = str(params.get("query") or "").strip()
        if not query:
            return ToolResult(False, error="give a query: what to look for in the documents")
        hits = await sync_to_async(search.search)(owner, query[:2000], int(params.get("k") or 5))
        if not hits:
            return ToolResult(True, f"No passage in the uploaded documents matches {query[:200]!r}.")
        lines = []
        for number, hit in enumerate(hits, start=1):
            lines.append(f"[{number}] {cite(hit.name, hit.location)}:\n{hit.text[:TEXT_MAX]}")
        # What the answer drew on, kept with it so the page shows chips that open each passage
        # (and the words the search matched marked in it).
        sources = [{"passage_id": h.passage_id, "document_id": h.document_id, "name": h.name,
                    "location": h.location, "where": describe(h.location), "query": query[:QUERY_MAX]} for h in hits]
        return ToolResult(True, "\n\n".join(lines), metadata={"sources": sources, "cite_note": CITE_NOTE})


def _make(_registry) -> Tool:
    return KnowledgeSearchTool()


def register() -> None:
    """Add knowledge_search to the process-wide registry (KnowledgeConfig.ready)."""
    register_app_tools(_make)
