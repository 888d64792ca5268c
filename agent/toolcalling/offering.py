"""Which tools a constrained step offers: all of them, or for a capped profile (a small model's)
the few that fit the request by words and meaning (`choose`), without the tools that need an
address nobody gave (`without_invented_addresses`); and whether a request names a tool outright.
"""

from __future__ import annotations

import re

from agent.llm.messages import ChatMessage
from agent.toolcalling import toolmeaning, toolselect

RELEVANT = 0.3  # of the best match's score: a capped step ranking on words offers no tool that matches less
# By meaning, a capped step adds the tools no further than this (cosine) from the closest one to
# the word matches: with all-MiniLM-L6-v2 on the bench's tuning wordings (bench/tool_offer.py
# --meaning) the smallest offer that kept every needed tool (0.1 and more offered more, and lost one).
CLOSE = 0.05


async def meaning(tools: list, query: str, cap: int) -> toolmeaning.Meaning | None:
    """For a capped step (a small model's profile): how close the request is in meaning to each
    tool, or None (no cap: nothing is chosen, and the turn pays no embedding call; no embedding
    model: the words decide)."""
    return await toolmeaning.similarities(tools, query) if cap > 0 else None


def choose(tools: list, query: str, cap: int, used: set[str], meaning: toolmeaning.Meaning | None = None) -> list:
    """The tools a step may call, best match for the request first: with a cap (a small
    model's profile), at most `cap` of the best word matches (at least RELEVANT of the best
    BM25 score, among the tools a word gate lets through: Tool.offer_when) and, where an
    embedding model answers (`meaning`), the tools closest in meaning (within CLOSE of the
    closest), in fused order; and those already used this turn. Without a cap (0), all. No
    fixed core set: for a small model each extra name is one more wrong choice."""
    if cap <= 0:
        return toolselect.ranked(tools, query)
    scored = toolselect.scored(toolselect.mentioned(tools, query, used), query)
    best = scored[0][1] if scored else 0.0
    if meaning is None:
        floor = best * RELEVANT if best > 0 else 0.0  # nothing matches: the first `cap`, as ranked
        return [t for i, (t, score) in enumerate(scored) if (i < cap and score >= floor) or t.name in used]
    # With meaning, words add only what they match (their "first `cap`" is the profile's order).
    words = [t for i, (t, score) in enumerate(scored) if i < cap and score > 0 and score >= best * RELEVANT]
    close = toolmeaning.ranked(tools, meaning.whole)
    near = [t for i, (t, score) in enumerate(close) if i < cap and score >= close[0][1] - CLOSE]
    wanted = {t.name for t in words + near}
    fused = toolmeaning.fused([[t for t, score in scored if score > 0], [t for t, _ in close]])
    chosen = [t for t in fused if t.name in wanted][:cap]
    if words and words[0] not in chosen:
        # The best word match keeps a place: an embedding model that says little (a tiny one, a
        # request in another language) must not push out the tool the request's words name.
        chosen = [*chosen[:cap - 1], words[0]]
    return chosen + [t for t in tools if t.name in used and t not in chosen]


# An address a call could be given: a URL, "www.…", localhost, an IP, or a host name ("example.org",
# "api.shop.test/orders"). A word ending in a file's extension ("config.json") is a file, not a host.
_ADDRESS = re.compile(
    r"\bhttps?://|\bwww\.|\blocalhost\b|\b\d{1,3}(?:\.\d{1,3}){3}\b|\b(?:[a-z0-9-]+\.)+([a-z]{2,24})\b(?!\.\w)", re.I)
FILE_EXTENSIONS = frozenset("""txt csv tsv json jsonl md log py yaml yml toml ini cfg conf html htm xml pdf doc docx odt
rtf xls xlsx ods ppt pptx png jpg jpeg gif svg webp bmp js ts css sh bash zip gz tar tgz bz2 xz mp3 mp4 wav ogg mov
ipynb sql db sqlite rs go c h cpp hpp java rb php lock env bak tmp""".split())


def has_address(texts) -> bool:
    """Whether any of `texts` holds an address (see _ADDRESS) that a tool taking a `url` could be given."""
    for text in texts:
        for match in _ADDRESS.finditer(text or ""):
            if match.group(1) is None or match.group(1).lower() not in FILE_EXTENSIONS:
                return True
    return False


def said_and_found(context: list[ChatMessage]) -> list[str]:
    """What the owner said and what tools found (results that are no error): where an address a
    call may use can come from. The model's own calls and their failures are not: an address it
    invented comes back in the error of the call that tried it."""
    return [m.content for m in context if m.role == "user" or (m.role == "tool" and not m.content.startswith("ERROR"))]


def takes_address(tool) -> bool:
    """A tool that cannot be called without a `url` (web_view, http_request, an MCP server's fetch)."""
    return "url" in ((tool.parameters or {}).get("required") or ())


def without_invented_addresses(tools: list, texts) -> list:
    """For a capped step (a small model's profile): the tools that need a `url` are offered only
    when the conversation holds an address to give them (the request, an earlier message, a
    search result). Without one, Qwen2.5-Coder-0.5B posted "port 8080" to an invented
    http://localhost:8080 instead of writing config.json, and fetched https://www.example.com
    for "read the manual of the web_view tool": a call that can only be made with an invented
    address is no choice to offer."""
    if not any(takes_address(t) for t in tools) or has_address(texts):
        return tools
    return [t for t in tools if not takes_address(t)]


def names_a_tool(request: str, tools: list) -> bool:
    """The request names one of `tools` by an exact name no sentence says by chance ("use
    code_exec to …": one with an underscore; "the scratchpad" or "my todo" are just words)."""
    return any("_" in t.name and t.name in (request or "")
               and re.search(rf"(?<![\w-]){re.escape(t.name)}(?![\w-])", request) for t in tools)
