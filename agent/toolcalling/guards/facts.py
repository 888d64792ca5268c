"""Slip: a small model's fact, kept from the owner's words alone, that is not what they said — a
word or number nobody said ("4417" for "4471", "prefers" for "I take"), or the key written again
as the value ("locker" for "my locker is number 214"). Kept when every word of it was said
(`said`), else asked again as the detail in the owner's words (`fact_prompt`), kept only when
that is said.
"""

from __future__ import annotations

import re

from agent.llm.messages import ChatMessage
from agent.toolcalling import toolmeaning

FACT_CHARS = 300  # a detail longer than this is the model rambling: its own value stays
FACT_SYSTEM = "You copy details from the user's message exactly, in the user's own words."
# Asked in turn until a reply is said: Qwen2.5-Coder-0.5B gave "Dr. Haddad" and "Number 214" to
# the first, and "My name is John." for "fyi my bike is a green Veloria Strada"; to the second,
# the message itself (its opening cue taken off by `detail_from`).
FACT_ASKS = (
    "My message: {request}\n\nReply with only the detail from my message that I want you to keep in mind "
    "(a name, a number, a date or a preference), in my own words, nothing else.",
    "My message: {request}\n\nCopy the part of my message that states the fact about me, word for word:",
)
# How a message to keep something opens, not the fact itself ("fyi", "don't forget:").
_CUE = re.compile(r"^(?:(?:fyi|btw|just so you know|please|don'?t forget|do not forget|remember|keep in mind|"
                  r"note|for the record)\b(?: that)?[\s:,.-]*)+", re.I)
_WORD = re.compile(r"\w+")
# Words a value may hold that nobody needs to have said ("my locker is 214" kept as "is 214").
_FILLER = frozenset("a an the is are was my his her their its of on in at to and or with for it".split())


def words(text: str) -> set[str]:
    """The words of `text` as compared here: lower case, a plural's "s" off."""
    text = re.sub(r"['’]s\b", "", (text or "").lower())  # "Odile's" is Odile
    return {w[:-1] if len(w) > 3 and w.endswith("s") and not w.endswith("ss") else w for w in _WORD.findall(text)}


def said(value: str, heard: str, key: str = "") -> bool:
    """Every word of `value` (but filler) is in `heard` (what the owner said, what earlier turns
    found), and it is more than the key's words again."""
    own = words(value) - _FILLER
    return bool(own) and own <= words(heard) and not own <= words(key)


def heard(context: list[ChatMessage]) -> str:
    """What a fact kept from words alone may say: what the owner said, and what earlier turns
    answered and found. Not the system prompt: the remembered facts are in it, and an update
    ("my dentist changed, it's now Dr. Haddad") kept as the old value is the slip; nor this
    turn's own steps, where the model wrote the value it is checked for."""
    start = max((i for i, m in enumerate(context) if m.role == "user" and not m.is_summary), default=len(context))
    return "\n".join(m.content for i, m in enumerate(context) if isinstance(m.content, str) and m.role != "system"
                     and (i <= start or m.role == "user"))


def names(text: str) -> set[str]:
    """The names and numbers `text` says ("fyi my bike is a green Veloria Strada": Veloria, Strada):
    a word with a digit, or a capitalised one that does not open a sentence (after "Dr." it may)."""
    found, before = [], ""
    for token in (text or "").split():
        word = token.strip("'\"“”‘’()[],;")
        opens = not before or (before[-1] in ".!?:" and not (before[:1].isupper() and len(before) <= 4))
        if any(c.isdigit() for c in word) or (word[:1].isupper() and word != "I" and not opens):
            found.append(word)
        before = token
    return words(" ".join(found))


def leaves_out(value: str, key: str, request: str) -> set[str]:
    """The names and numbers of a request of one part that neither the fact's value nor its key
    holds: "green" kept for "fyi my bike is a green Veloria Strada" ({"veloria", "strada"})."""
    return set() if toolmeaning.parts_of(request) else names(request) - words(f"{value} {key}")


def is_its_value(key: str, value: str) -> bool:
    """The key is the value again ("Dr. Haddad" = "Dr. Haddad"): no key the owner would look under."""
    own = words(key) - _FILLER
    return bool(own) and own <= words(value)


def fact_prompt(request: str, ask: int = 0) -> list[ChatMessage]:
    """What the detail is asked from: the owner's message alone, for the detail in their words
    (FACT_ASKS[ask])."""
    return [ChatMessage(role="system", content=FACT_SYSTEM),
            ChatMessage(role="user", content=FACT_ASKS[ask].format(request=request))]


def detail_from(reply: str) -> str:
    """The detail in a short call's reply: its first line, without quotes or a closing full stop."""
    line = (reply or "").strip().splitlines()[0].strip() if (reply or "").strip() else ""
    line = _CUE.sub("", line.strip("'\"“”‘’`").strip()).strip("'\"“”‘’`").strip()
    return line[:-1].rstrip() if line.endswith(".") and not line.endswith("..") else line
