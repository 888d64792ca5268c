"""Tools chosen by meaning for a capped step (a small model's profile, `max_tools`): how close the
request is to each tool's description and example requests (`Tool.examples`: the mean of the
three closest), by the embedding model knowledge search uses (knowledge_app.embeddings). The
step offers the tools closest in meaning beside the best word matches
(agent.toolcalling.offering.choose).

A tool's vectors are worked out once per process and tool version (its name, description and
examples, and the embedding model): a reloaded user tool or a changed MCP tool is a new version.
A request then costs one embedding call (its vector, and its parts' for `what_is_left`, in one
batch, with a short timeout), and later steps of the same turn none. Without an embedding
model, or when the server is slow or down, `similarities` gives None and the caller ranks on
words (agent.toolcalling.toolselect). A profile that does not cap its tools never gets here.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import math
import operator
import re
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field

from django.conf import settings

from knowledge_app import embeddings
from navi_project import connections

log = logging.getLogger(__name__)

REQUEST_TIMEOUT_S = 3.0  # a turn waits this long for its request's vector, then ranks on words
# The first capped turn of a process also embeds every tool (a model may be loading): it waits
# this long, then ranks on words while the tools' vectors are finished and kept for later turns.
TOOLS_TIMEOUT_S = 10.0
MAX_REQUEST_CHARS = 2000  # what of a long request is embedded: its start says what it asks
MAX_EXAMPLES = 12  # of a tool's examples embedded (a user or MCP tool's own text is not trusted to be short)
MAX_TOOL_VERSIONS = 512  # tool versions kept (user tools reloaded many times leave old ones)
MAX_REQUESTS = 64  # requests whose vectors are kept (a turn's later steps ask again)
# A multi-part request ("read the page, then save the price") split where a new part starts,
# for `what_is_left`: sentence ends, semicolons, and "and"/"then" after a comma or on their own.
_PARTS = re.compile(r"(?:[.!?;]+\s+|\s+[—–]\s+|,?\s+\b(?:and then|then|and also|and|after that|afterwards)\b\s+)", re.I)
MIN_PART_WORDS = 2  # a shorter piece ("and so") is no part of its own
MAX_PARTS = 6  # parts embedded (a request of more is a list, not steps to check off)


class _Answer:
    """Not a tool: what a part of a request reads like when it asks for the reply itself ("let
    me know what it says"), so `what_is_left` does not take such a part for a tool's work."""

    name = ANSWER = "(answer)"  # no tool can be called this: a name has no brackets
    description = "Reply to the user in words, with what is already known."
    examples = ("let me know what you find", "reply with the answer", "say what it is", "give me the number",
                "explain it in a sentence", "is it there?")


ANSWER = _Answer.ANSWER


@dataclass
class Meaning:
    """How close a request (`whole`) and each of its parts (`parts`, only for a request of more
    than one) are to each tool: {tool name: cosine similarity}, the mean of the tool's closest texts
    (and to a plain reply: ANSWER)."""

    whole: dict[str, float]
    parts: list[dict[str, float]] = field(default_factory=list)
    part_texts: list[str] = field(default_factory=list)  # the parts themselves, in order


_lock = threading.Lock()
_tools: OrderedDict[str, list[tuple[float, ...]]] = OrderedDict()  # tool version -> unit vectors
_requests: OrderedDict[tuple, tuple[float, ...]] = OrderedDict()  # (model, text) -> unit vector
_pending: set[str] = set()  # tool versions being embedded now (by a turn that stopped waiting, say)


def _model() -> tuple[str, str]:
    return connections.embedding_model(), settings.EMBEDDING_BASE_URL or connections.ollama_url()


def texts_of(tool) -> list[str]:
    """What a tool is known by: its name and description, and each of its example requests."""
    description = " ".join(str(getattr(tool, "description", "") or "")[:MAX_REQUEST_CHARS * 2].split())
    examples = [" ".join(str(e)[:MAX_REQUEST_CHARS].split()) for e in list(getattr(tool, "examples", ()) or ())[:MAX_EXAMPLES]]
    return [f"{tool.name.replace('_', ' ')}: {description}"[:MAX_REQUEST_CHARS], *[e for e in examples if e]]


def version(tool) -> str:
    """The tool's version for the cache: its texts and the embedding model."""
    digest = hashlib.sha256(repr((_model(), texts_of(tool))).encode())
    return digest.hexdigest()


# Quoted text is one piece: "Write 'salt and pepper' into list.txt" is one part.
_QUOTED = re.compile(r"(?<!\w)'[^'\n]+'(?!\w)|\"[^\"\n]+\"|\u201c[^\u201d\n]+\u201d|\u2018[^\u2019\n]+\u2019(?!\w)")


def parts_of(request: str) -> list[str]:
    """The parts of a multi-part request, in order ([] for a request of one part); never split
    inside quotes."""
    request = request or ""
    quoted = [m.span() for m in _QUOTED.finditer(request)]
    pieces, last = [], 0
    for match in _PARTS.finditer(request):
        if any(start < match.start() < end for start, end in quoted):
            continue
        pieces.append(request[last:match.start()])
        last = match.end()
    pieces.append(request[last:])
    pieces = [p.strip(" ,") for p in pieces]
    parts = [p for p in pieces if len(p.split()) >= MIN_PART_WORDS]
    return parts[:MAX_PARTS] if len(parts) > 1 else []


def _unit(vector: list[float]) -> tuple[float, ...]:
    norm = math.sqrt(sum(x * x for x in vector)) or 1.0
    return tuple(x / norm for x in vector)


def _cosine(a: tuple[float, ...], b: tuple[float, ...]) -> float:
    return sum(map(operator.mul, a, b)) if len(a) == len(b) else 0.0


def known(tools: list) -> bool:
    """Every tool's vectors are already worked out (for tests and the bench)."""
    with _lock:
        return all(version(t) in _tools for t in tools)


def forget() -> None:
    """Drop every kept vector (tests switch embedding servers)."""
    with _lock:
        _tools.clear()
        _requests.clear()
        _pending.clear()


def _remember(store: OrderedDict, key, value, limit: int) -> None:
    with _lock:
        store[key] = value
        store.move_to_end(key)
        while len(store) > limit:
            store.popitem(last=False)


def _embed_and_keep(asked: list[str], missing: dict, model: tuple[str, str], timeout: float) -> None:
    """Embed the requests and the tools not yet known in one batch, and keep their vectors: run in
    a thread, which finishes and keeps them even when the turn stopped waiting (the next one gains)."""
    texts = asked + [text for tool in missing.values() for text in texts_of(tool)]
    started = time.monotonic()
    try:
        vectors = [_unit(v) for v in embeddings.embed(texts, timeout=timeout)]
    finally:
        with _lock:
            _pending.difference_update(missing)
    if missing:
        log.info("embedded %d tool texts in %.1f s", len(texts) - len(asked), time.monotonic() - started)
    for text, vector in zip(asked, vectors):
        _remember(_requests, (model, text), vector, MAX_REQUESTS)
    rest = iter(vectors[len(asked):])
    for key, tool in missing.items():
        _remember(_tools, key, [next(rest) for _ in texts_of(tool)], MAX_TOOL_VERSIONS)


def _retrieved(job: asyncio.Future) -> None:
    """A call that failed after its turn stopped waiting: logged once, not left unretrieved."""
    if not job.cancelled() and (exc := job.exception()) is not None:
        log.info("embedding the tools failed after the turn went on: %s", exc)


async def similarities(tools: list, request: str) -> Meaning | None:
    """How close `request` is in meaning to each of `tools`, or None when no embedding model
    answers in time (the caller then ranks on words). One embedding call at most: the request,
    its parts and any tool not yet known, in one batch."""
    if not tools or not embeddings.usable():
        return None
    tools = [*tools, _Answer()]
    request = (request or "")[:MAX_REQUEST_CHARS]
    wanted = [request, *parts_of(request)]
    model = _model()
    with _lock:
        versions = {t.name: version(t) for t in tools}
        missing = {v: t for t in tools if (v := versions[t.name]) not in _tools}
        if missing.keys() & _pending:  # another turn's call is embedding them: words this once
            return None
        _pending.update(missing)
        asked = [text for text in dict.fromkeys(wanted) if (model, text) not in _requests]
    if asked or missing:
        wait = TOOLS_TIMEOUT_S if missing else REQUEST_TIMEOUT_S
        # With tools to embed the call may outlive the wait: it finishes and keeps their vectors.
        timeout = settings.EMBEDDING_TIMEOUT_S if missing else REQUEST_TIMEOUT_S
        try:
            # Shielded: a turn that stops waiting never cancels the call before it started (its
            # tools would stay pending).
            job = asyncio.ensure_future(asyncio.to_thread(_embed_and_keep, asked, missing, model, timeout))
            job.add_done_callback(_retrieved)
            await asyncio.wait_for(asyncio.shield(job), wait)
        except (embeddings.EmbeddingError, TimeoutError) as exc:
            log.info("tools ranked on words: no vectors from the embedding model (%s)", exc or type(exc).__name__)
            return None
    with _lock:
        try:
            by_tool = {name: _tools[v] for name, v in versions.items()}
            asked_vectors = [_requests[(model, text)] for text in wanted]
        except KeyError:  # pushed out by other turns in between: words this once
            return None
    scores = [{name: _closest(q, vectors) for name, vectors in by_tool.items()} for q in asked_vectors]
    return Meaning(scores[0], scores[1:], wanted[1:])


CLOSEST = 3  # of a tool's texts (description, examples) whose similarities are averaged


def _closest(query: tuple[float, ...], vectors: list[tuple[float, ...]]) -> float:
    """How close a request is to a tool: the mean of its CLOSEST closest texts. The single best
    text let one shared word decide with a small embedding model (all-MiniLM-L6-v2 put "look up
    the weather in Lisbon" closest to memory_save, for its example "I moved to Lisbon, update
    that"); on the eval's tuning wordings and new ones the mean of three offered a needed tool
    more often, forcing no fewer right first calls."""
    best = sorted((_cosine(query, v) for v in vectors), reverse=True)[:CLOSEST]
    return sum(best) / len(best) if best else -1.0


def ranked(tools: list, scores: dict[str, float]) -> list[tuple[object, float]]:
    """(tool, similarity) pairs, closest first (ties keep the given order)."""
    order = sorted(range(len(tools)), key=lambda i: (-scores.get(tools[i].name, -1.0), i))
    return [(tools[i], scores.get(tools[i].name, -1.0)) for i in order]


FUSE_K = 3  # reciprocal rank fusion: a tool ranked first by either ranking weighs 1/3


def fused(rankings: list[list]) -> list:
    """The tools of several rankings (best first each) in one order, by reciprocal rank fusion:
    a tool near the top of either comes before one in the middle of both."""
    score: dict[str, float] = {}
    by_name = {}
    for ranking in rankings:
        for i, tool in enumerate(ranking):
            score[tool.name] = score.get(tool.name, 0.0) + 1 / (FUSE_K + i)
            by_name.setdefault(tool.name, tool)
    return sorted(by_name.values(), key=lambda tool: -score[tool.name])
