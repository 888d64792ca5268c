"""Slip: a small model's answer over its tool results that is none — a stock refusal ("I'm sorry,
but I can't assist with that"), code to do what a tool already did, or the prompt's data marker
copied where the value goes. Such a start is dropped and the answer asked once more; refused
again, the results themselves are the answer (`results_said`).
"""

from __future__ import annotations

import contextlib
import logging
import re

from agent.llm.messages import ChatMessage, LLMChunk
from agent.toolcalling.guards import ledger
from agent.toolcalling.prompts import request_and_results

log = logging.getLogger(__name__)

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


async def unless_refusal(stream, temperature: float, said: str):
    """The answer's chunks, its first words held back until they show it is an answer: a small
    model writes a stock refusal ("I'm sorry, but I can't assist with that") now and then over
    results its tools just returned, or code that would fetch what its tool already fetched
    ("To fetch the stock data you can use requests: ```python …"). Such a start is dropped and
    the answer asked once more, at temperature 0, as a report of what was done; refused again,
    the answer is `said` (what the tools returned)."""
    for again in (False, True):
        refused = False
        async for chunk in held_refusal(stream(0.0 if again else temperature, again), code_too=not again):
            if chunk is None:  # it ends after a None
                refused = True
            else:
                yield chunk
        if not refused:
            return
        ledger.fired("refusals")
        log.info("a small model refused to answer from its results, or wrote code instead")
    yield LLMChunk(content=said, done=True, finish_reason="stop")


async def held_refusal(stream, code_too: bool = True):
    """A stream's chunks, its first words held back (HELD_CHARS, or REFUSAL_CHARS when
    `code_too` is off); None (and the stream closed) when they are a stock refusal or, with
    `code_too`, hold a code block (not_an_answer)."""
    held, text = [], ""
    limit = HELD_CHARS if code_too else REFUSAL_CHARS
    try:
        async for chunk in stream:
            if held is None:
                yield chunk
                continue
            held.append(chunk)
            text += chunk.content or ""
            if len(text) < limit and not chunk.done and not (code_too and holds_code(text)):
                continue
            if not_an_answer(text, code_too):
                yield None
                return
            for kept in held:
                yield kept
            held = None
        if held is not None:  # the whole answer was shorter than the look-ahead
            if not_an_answer(text, code_too):
                yield None
                return
            for kept in held:
                yield kept
    finally:
        with contextlib.suppress(Exception):
            await stream.aclose()
