"""The facts about the owner that bear on the turn's request, found by meaning (and by the
words: memory_app.search.search_facts, with knowledge_app's embeddings when there is a model).

The system prompt carries the memory summary, the same bytes every turn (a server's prompt
cache keeps it); these facts change with every request, so `prompts.build_context` writes them
under the request, beside the clock. Facts saved after untrusted content stay marked as
unverified there as in the summary. Once per turn: the request's vector is made first in a
thread of its own, so the search on the database thread does not hold it while a model server
answers.
"""

from __future__ import annotations

import re

from asgiref.sync import sync_to_async

from knowledge_app.embeddings import embed_query
from memory_app.models import MemoryFact
from memory_app.search import search_facts
from memory_app.services import UNVERIFIED_HEADER, has_facts
from navi_project.hop import db_hop

RECALL_LIMIT = 5
# The turn waits this long for its request's vector (a server that does not answer is then
# skipped for a while: knowledge_app.embeddings.RETRY_AFTER_S), then recalls by the words.
EMBED_TIMEOUT_S = 5.0
QUERY_MAX = 2000  # characters of the request searched with
HEADER = "Facts I remember that may bear on this request:"
# Words every request has: by the words alone they would recall any fact that holds them.
_FILLER = frozenset(
    "a an the and or but if of to in on at by for from with about as into over after before is are was were be been "
    "am do does did have has had can could would should will shall may might must i me my mine you your we our us "
    "it its this that these those there here what which who whom whose when where why how please tell know "
    "remember any some not no yes so just also too very than then them they he she his her him".split()
)
_WORD = re.compile(r"\w+", re.UNICODE)


def query_of(request: str) -> str:
    """The request's words that say something (filler dropped), as the search's query."""
    words = [w for w in _WORD.findall(request[:QUERY_MAX]) if w.lower() not in _FILLER]
    return " ".join(words)


async def relevant_facts(owner_id: int | None, request: str, *, known: bool | None = None) -> list[MemoryFact]:
    """The owner's facts nearest the request, best first ([] without an owner, a request or
    facts; `known`: whether the owner has facts, when the turn's start read it)."""
    query = query_of(request)
    if owner_id is None or not query or known is False:
        return []
    if known is None and not await db_hop(has_facts, owner_id):
        return []
    await sync_to_async(embed_query, thread_sensitive=False)(query, EMBED_TIMEOUT_S)  # kept for the search below
    return await db_hop(search_facts, owner_id, query, RECALL_LIMIT)


def facts_text(facts: list[MemoryFact], summary: str) -> str:
    """The recalled facts as written under the request ("" if the summary already says each),
    the unverified ones apart, marked as in the summary."""
    fresh = [f for f in facts if _line(f) not in summary]
    trusted = [f for f in fresh if not f.untrusted_source]
    unverified = [f for f in fresh if f.untrusted_source]
    blocks = []
    if trusted:
        blocks.append(HEADER + "\n" + "\n".join(f"- {_line(f)}" for f in trusted))
    if unverified:
        blocks.append(UNVERIFIED_HEADER + "\n" + "\n".join(f"- {_line(f)}" for f in unverified))
    return "\n\n".join(blocks)


def _line(fact: MemoryFact) -> str:
    return f"{fact.category}: {fact.key} = {fact.value}"
