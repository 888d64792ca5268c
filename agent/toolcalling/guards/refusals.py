"""Slip: a small model's answer over its tool results that is none — a stock refusal ("I'm sorry,
but I can't assist with that"), code to do what a tool already did, or the prompt's data marker
copied where the value goes. Such a start is dropped and the answer asked once more; refused
again, the results themselves are the answer (`results_said`).
"""

from __future__ import annotations

import re

from agent.llm.messages import ChatMessage
from agent.toolcalling.prompts import request_and_results

REFUSAL_CHARS = 60  # of an answer read before it is shown: enough to tell a stock refusal
_REFUSAL = re.compile(
    r"^\W*(?:i'?m sorry|i am sorry|sorry|i apologi[sz]e|unfortunately)\b[^.!?]{0,40}?"
    r"\b(?:can(?:no|')t|could(?:n't| not)|unable|not able|do not have|don't have)\b", re.I)


def is_refusal(text: str) -> bool:
    """A stock refusal ("I'm sorry, but I can't assist with that request.")."""
    return bool(_REFUSAL.match((text or "").replace("\u2019", "'")))


HELD_CHARS = 200  # of an answer after tool results read before it is shown: a code block begins in them


def holds_code(text: str) -> bool:
    """A code block has begun (the results prompt asks for plain sentences: its tools already ran)."""
    return "```" in (text or "")


def not_an_answer(text: str, code_too: bool = True) -> bool:
    """The start of a small model's answer over its results that is none: a stock refusal, or
    (`code_too`) code to do what a tool already did, or the data marker of the prompt copied
    where the value goes ("The file that mentions kiwi is [UNTRUSTED DATA ...].")."""
    return is_refusal(text) or (code_too and (holds_code(text) or "UNTRUSTED DATA" in (text or "")))


def results_said(context: list[ChatMessage]) -> str:
    """What this turn's tools returned, as the answer when the model refused twice to write one:
    the results themselves say more than a refusal over work that was done."""
    _, results = request_and_results(context)
    if not results:
        return "I could not write an answer to that. Ask me again, or in other words."
    return f"My tools returned:\n\n{results}"
