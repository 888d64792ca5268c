"""A plain question, answered at once (small models only: the `plain` group of the ledger).

Qwen2.5-Coder-0.5B, asked "What is the capital of France? Answer in one short sentence." with its
tools offered, called knowledge_search, then answered in JSON; asked "And Italy?" next, it put
Italy on the to-do list: 4 and 10 calls before the first word (bench/README, issue 57). A request
that gives a tool nothing to do is answered in one streamed call with no tools sent, so the
first word comes as soon as the server has read the prompt.

What gives a tool something to do is read from the request's form, not from any task: the
owner's own things ("my", "we"), a number to work with (two or more numbers: a sum a small model
gets wrong in its head), a word of a tool's work or of what only a tool knows (save, read, file,
today, the weather …), a question about what Navi can do or has ("can you", "your"), one that
counts or picks among things ("how many", "which"), a file name, a web address, a tool named, an
image, a long request; and a conversation whose last turn used tools (a follow-up there may be
about what they found). Any of these, and the step is the model's to choose as before. Meaning
is no help here: with all-MiniLM-L6-v2, a dozen plain questions were as close to their closest
tool (0.15–0.36, 1.8–3.0 standard deviations above the mean tool) as the tuning and dev
requests (0.16–0.60, 1.5–3.5).
"""

from __future__ import annotations

import re

from agent.llm.messages import ChatMessage
from agent.toolcalling import offering, toolselect

MAX_WORDS = 30  # a longer request is a task described, not a question

# The owner's own things, what Navi can do or has, a count or a pick among things.
_OWN = re.compile(r"\b(?:my|mine|our|ours|i|i'm|i've|i'd|i'll|im|we|we're|we've|us|"
                  r"your|yours|yourself|can\s+you|could\s+you|do\s+you\s+have|are\s+you\s+able|"
                  r"how\s+many|how\s+much|which|is\s+there|are\s+there)\b", re.I)
# A tool's work, or what only a tool can know now: any of these leaves the choice to the model.
_TOOL_WORDS = re.compile(r"""\b(?:
    save[sd]?|saving|store[sd]?|keep|kept|remember\w*|remind\w*|forget\w*|forgot|memor\w*|note[sd]?|noting|jot\w*|
    write|writes|written|wrote|add|adds|added|put|record\w*|log|logs|create[sd]?|delete[sd]?|remove[sd]?|erase[sd]?|
    read|reads|open|opens|look|looks|search\w*|find|finds|found|check\w*|fetch\w*|download\w*|visit\w*|brows\w*|
    run|runs|execute[sd]?|calculat\w*|compute[sd]?|work\s+out|list|lists|schedul\w*|send|sends|sent|publish\w*|
    share[sd]?|upload\w*|switch\w*|cop(?:y|ies|ied)|move[sd]?|rename[sd]?|tick\w*|mark\w*|update[sd]?|change[sd]?|
    set|install\w*|draw\w*|generat\w*|convert\w*|count\w*|sum|total\w*|plot\w*|
    file|files|folder\w*|director\w*|page|pages|site|sites|website\w*|link|links|url|urls|document\w*|docs?|pdf|
    todo|to-do|tasks?|scratchpad|email\w*|e-mail|inbox|calendar|routine\w*|profile\w*|tools?|image\w*|photo\w*|
    picture\w*|screenshot\w*|ssh|server\w*|shell|terminal|command\w*|python|code|script\w*|program\w*|api|
    today|tonight|tomorrow|yesterday|now|current\w*|latest|recent\w*|news|weather|forecast|price\w*|stock\w*|
    online|internet|web|google
)\b""", re.I | re.X)
_NUMBER = re.compile(r"\d+(?:[.,]\d+)?")


def asks_nothing(request: str, history: list[ChatMessage], tools: list) -> bool:
    """Whether `request` (the turn's, as the owner wrote it) gives none of `tools` anything to do
    (see the module's docstring); `history`: the conversation up to and with it."""
    words = request.split()
    if not words or len(words) > MAX_WORDS:
        return False
    if _OWN.search(request) or _TOOL_WORDS.search(request) or len(_NUMBER.findall(request)) >= 2:
        return False
    if toolselect.file_names(request) or offering.has_address([request]) or offering.names_a_tool(request, tools):
        return False
    return not _tools_in_last_turn(history)


def _tools_in_last_turn(history: list[ChatMessage]) -> bool:
    """Whether the turn before the request (from the owner's message before it) used a tool or
    sent an image."""
    users = [i for i, m in enumerate(history) if m.role == "user" and not m.is_summary]
    if not users:
        return False
    if history[users[-1]].images:
        return True
    start = users[-2] if len(users) > 1 else users[-1]
    return any(m.role == "tool" or m.tool_calls for m in history[start:users[-1]])
