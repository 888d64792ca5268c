"""Fewer, smaller tools for small windows: the tools most relevant to the message by words (BM25
over names, keywords and descriptions), fused with the closest in meaning where an embedding
model answers (agent.toolcalling.toolmeaning), plus a core set; and schemas in a compact form."""

from __future__ import annotations

import copy
import functools
import math
import re
from collections import Counter
from typing import Any

from agent.toolcalling import toolmeaning

# Offered whenever they are in the profile: how the model finds out what else it can do, and
# the memory every turn may need.
CORE = ("list_tools", "tool_manual", "memory_search")
_WORD = re.compile(r"[a-z0-9]+")
K1, B = 1.2, 0.75
# Words that say nothing about which tool fits ("my", "the", "on", numbers): with a few dozen short
# documents BM25 would rate a rare one highly (a tool whose description says "on a host").
STOP = frozenset("""a about above after again all also am an and any are as at be been before being
below between both but by can could did do does doing down during each else few for from further had has
have having he her here hers him his how i if in into is it its itself just let me more most my myself no
nor not now of off on once only or other our ours out over own please same she should so some such than
that the their theirs them then there these they this those through to too under until up very was we
were what when where which while who whom why will with would you your yours""".split())
# A file name in the request ("notes.txt", "data/sales.csv"): the file tools are meant.
_FILE_NAME = re.compile(r"\b[\w./-]+\.(?:txt|csv|json|md|log|py|yaml|yml|toml|ini|html|xml|tsv)\b", re.I)
FILE_CUE = "filesystem"


def _stem(word: str) -> str:
    """A light suffix strip so "files", "tasks" and "created" meet "file", "task", "create"."""
    for suffix, keep in (("ies", "y"), ("ing", ""), ("es", ""), ("ed", ""), ("s", "")):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3 and not word.endswith("ss"):
            return word[: -len(suffix)] + keep
    return word


def _words(text: str) -> list[str]:
    return [_stem(w) for w in _WORD.findall(text.lower().replace("_", " ")) if w not in STOP and not w.isdigit()]


# A web address: the file name at the end of its path ("http://shop.test/api/stock.json") is no
# file of the owner's.
_URL = re.compile(r"\b(?:https?://|www\.)\S+", re.I)


def file_names(text: str) -> list[str]:
    """The file names a request mentions ("notes.txt", "data/sales.csv"), in order, once each;
    not the end of a web address."""
    return list(dict.fromkeys(m.group(0).strip("./") for m in _FILE_NAME.finditer(_URL.sub(" ", text or ""))))


def said(query: str) -> set[str]:
    """The request's words as subjects are matched (stemmed, no filler)."""
    return set(_words(query))


def subject_words(tool) -> set[str]:
    """A tool's `offer_when` words, stemmed."""
    return set(_words(getattr(tool, "offer_when", "")))


# Everyday ways to ask to keep or recall a fact, as the words that say so: "don't forget: …" asks
# to remember, not to forget (a 0.5B model was offered memory_forget first); "in case it comes up
# later" is no schedule, and "remind me of my passport number" no reminder (it was offered
# schedule_routine first, and called it). "Note that I take my coffee with oat milk" is a fact
# about the owner to keep, not a working note (the verb "note" ranked the scratchpad first, and a
# 0.5B model wrote it into a scratchpad section).
_KEEP = re.compile(r"\b(?:(?:don'?t|do not|never)\s+forget|in case it comes up(?: later)?|for future reference|"
                   r"just so you know|(?:please\s+)?(?:make a |take )?note(?: down)? that(?=\s+(?:i|i'm|my|me|we|our)\b))\b",
                   re.I)
_RECALL = re.compile(r"\bremind me (?:of|what)\b", re.I)
# "What's my gym locker code again?" asks for a detail the owner told: its words name the detail,
# not a tool ("code" ranked code_exec first, and a 0.5B model printed the value from a program).
_RECALL_AGAIN = re.compile(r"\b(?:what|which|who|where|when)(?:'s|\s+(?:is|was|are|were))\s+my(?:\s+[\w'-]+){1,5}?\s+again\b", re.I)
# "my to-do list" is the todo tool's subject, though "to" and "do" are filler words.
_TODO = re.compile(r"\bto-do\b|\bto do(?= list)", re.I)


def query_words(query: str) -> str:
    """The request as it is ranked on: everyday ways to keep or recall a fact as "remember" and
    "recall" ("what's my … again?" as "recall" alone), "to-do" as "todo", and with a file name in
    it, the word "file" weighs too."""
    query = _TODO.sub("todo", _RECALL.sub("recall", _KEEP.sub("remember", _RECALL_AGAIN.sub("recall", query))))
    return f"{query} {FILE_CUE}" if file_names(query) else query


@functools.lru_cache(maxsize=1024)
def _terms(text: str) -> tuple[int, Counter]:
    """A document's length in words and its word counts: the same tool texts every turn, so
    worked out once per process (a turn ranked ~30 tools, ~2 ms before its model call)."""
    words = _words(text)
    return len(words), Counter(words)


@functools.lru_cache(maxsize=64)
def _collection(texts: tuple[str, ...]) -> tuple[float, Counter]:
    """The documents' average length and in how many of them each word occurs (per set of tools)."""
    stats = [_terms(text) for text in texts]
    return sum(n for n, _ in stats) / len(stats) or 1.0, Counter(w for _, counts in stats for w in counts)


def bm25_rank(documents: dict[str, str], query: str) -> list[tuple[str, float]]:
    """Names by BM25 score of their document against the query, best first (stable)."""
    docs = {name: _terms(text) for name, text in documents.items()}
    if not docs:
        return []
    average, frequency = _collection(tuple(documents.values()))
    terms = Counter(_words(query_words(query)))  # a word said twice weighs twice
    scores = []
    for order, (name, (length, counts)) in enumerate(docs.items()):
        score = 0.0
        for term in terms.keys() & counts.keys():
            idf = math.log(1 + (len(docs) - frequency[term] + 0.5) / (frequency[term] + 0.5))
            tf = counts[term]
            score += terms[term] * idf * tf * (K1 + 1) / (tf + K1 * (1 - B + B * length / average))
        scores.append((name, score, order))
    scores.sort(key=lambda s: (-s[1], s[2]))
    return [(name, score) for name, score, _ in scores]


def ranked(tools: list, query: str) -> list:
    """The tools, best BM25 match for the query first (ties keep the profile's order)."""
    return [tool for tool, _ in scored(tools, query)]


def scored(tools: list, query: str) -> list[tuple[Any, float]]:
    """(tool, BM25 score) pairs, best match for the query first (ties keep the profile's order)."""
    by_name = {t.name: t for t in tools}
    return [(by_name[name], score) for name, score in bm25_rank({t.name: _document(t) for t in tools}, query)]


def mentioned(tools: list, query: str, keep: set[str] | frozenset[str] = frozenset()) -> list:
    """The tools a capped selection ranking on words may offer for this request: those without
    `offer_when` words (a structural gate, see tools_app.base.Tool), those whose subject the
    request names (one of the words), and those in `keep`."""
    words = said(query)
    return [t for t in tools if t.name in keep or not getattr(t, "offer_when", "") or words & subject_words(t)]


def select(tools: list, query: str, cap: int, keep: set[str] | frozenset[str] = frozenset(),
           meaning: toolmeaning.Meaning | None = None) -> list:
    """At most `cap` tools (0 = all): the core set, tools already used this turn (`keep`), then
    the best BM25 matches for the query among the tools it mentions — fused with the closest in
    meaning where an embedding model answered (`meaning`, agent.toolcalling.toolmeaning) — in
    the profile's order."""
    if cap <= 0 or len(tools) <= cap:
        return list(tools)
    if meaning is None:
        tools = mentioned(tools, query, keep | set(CORE))
    by_name = {t.name: t for t in tools}
    chosen = [n for n in by_name if n in CORE or n in keep][:cap]
    documents = {t.name: _document(t) for t in tools if t.name not in chosen}
    by_words = bm25_rank(documents, query)
    order = [name for name, _ in by_words]
    if meaning is not None:
        matched = [by_name[name] for name, score in by_words if score > 0]
        closest = [t for t, _ in toolmeaning.ranked([by_name[n] for n in documents], meaning.whole)]
        order = [t.name for t in toolmeaning.fused([matched, closest])]
    for name in order:
        if len(chosen) >= cap:
            break
        chosen.append(name)
    wanted = set(chosen)
    return [t for t in tools if t.name in wanted]


def _document(tool) -> str:
    """What a tool is ranked on: its name (twice), its keywords and its description."""
    return f"{tool.name} {tool.name} {getattr(tool, 'keywords', '')} {tool.description}"


def compact(schema: dict[str, Any]) -> dict[str, Any]:
    """The tool's first sentence and its parameters without descriptions."""
    out = copy.deepcopy(schema)
    function = out.get("function", {})
    description = function.get("description") or ""
    function["description"] = re.split(r"(?<=[.!?])\s", description, maxsplit=1)[0]
    _strip_descriptions(function.get("parameters") or {})
    return out


def _strip_descriptions(node: Any) -> None:
    if isinstance(node, dict):
        props = node.get("properties")
        if isinstance(props, dict):
            for spec in props.values():
                if isinstance(spec, dict):
                    spec.pop("description", None)
                    _strip_descriptions(spec)
        if isinstance(node.get("items"), dict):
            _strip_descriptions(node["items"])


def schemas(tools: list, *, compact_form: bool) -> list[dict[str, Any]]:
    return [compact(t.schema()) if compact_form else t.schema() for t in tools]
