"""Tool calls written as text, on the stream: `CallTextFilter` shows text as it streams, except
what may be the start of a call (agent.toolcalling.toolcalls reads those), held back instead of
shown and retracted later.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from agent.llm.messages import ToolCall
from agent.toolcalling.toolcalls import FENCE_LANGS, PREFIX_MARKERS, balanced, extract_calls, without_invented_result

HOLD_CHARS = 1200  # ~300 tokens: the most text held back as a possible call before it is shown


class CallTextFilter:
    """Shows text as it streams, except what may be a call: that is held until it is known
    (at most HOLD_CHARS).

    A call can only start at the beginning of a line. While a line's start could still become
    a call marker it is held; once it cannot, it is shown and the rest of the line streams
    through. A marker holds everything up to the end of its block (or of the answer), which
    `finish()` then splits into calls and text to show. Text after a recovered call is held too:
    it is shown (less an invented result) only if another call follows it.
    """

    def __init__(self, offered: set[str] | frozenset[str] | Mapping[str, frozenset[str]]) -> None:
        self.offered = offered if isinstance(offered, Mapping) else frozenset(offered)
        self.held = ""  # text not shown yet, starting at a line start
        self.streaming_line = False  # inside a line already known not to start a call
        self.in_code = False  # inside a fenced block of another language: no calls there
        self.calls: list[ToolCall] = []
        self.after = ""  # text judged not a call since the last call: maybe its invented result

    def feed(self, chunk: str) -> str:
        shown = []
        at = 0
        while at < len(chunk):
            if self.streaming_line:  # the rest of a line that is not a call: through at once
                end = chunk.find("\n", at)
                if end < 0:
                    self._show(chunk[at:], shown)
                    break
                self._show(chunk[at : end + 1], shown)
                self.streaming_line, at = False, end + 1
                continue
            char = chunk[at]
            at += 1
            self.held += char
            verdict = self._verdict(self.held)
            if verdict == "show":
                self._show(self.held, shown)
                self._track_fence(self.held)
                self.streaming_line = not self.held.endswith("\n")
                self.held = ""
            elif verdict == "call":
                found = extract_calls(self.held, self.offered)
                if found.calls:
                    if self.calls:  # prose before this call, less the previous call's invented result
                        shown.append(_line(without_invented_result(self.after).strip()))
                        self.after = ""
                    shown.append(_line(found.text))
                    self.calls += found.calls
                else:
                    self._show(self.held, shown)
                self.held = ""
            elif len(self.held) > HOLD_CHARS:
                # Still "maybe a call" after a few hundred tokens: a small model writing
                # JSON-looking text would keep the owner waiting to the token cap. It is shown
                # (a call in it is still recovered from the whole answer at the end).
                self._show(self.held, shown)
                self._track_fence(self.held)
                self.streaming_line = not self.held.endswith("\n")
                self.held = ""
        return "".join(shown)

    @property
    def enough(self) -> bool:
        """A call was recovered and more than HOLD_CHARS followed it without another: the rest
        is a small model rambling (its invented result), and the call waits for it. The caller
        cuts the stream."""
        return bool(self.calls) and len(self.after) + len(self.held) > HOLD_CHARS

    def finish(self) -> tuple[str, list[ToolCall]]:
        """Text still to show, and every call recovered from the answer."""
        held, self.held = self.held, ""
        if self.calls:  # what followed the last call: shown only up to a further call
            found = extract_calls(self.after + held, self.offered, after_call=True)
            self.after = ""
            self.calls += found.calls
            return (found.text if found.calls else ""), self.calls
        if held:
            found = extract_calls(held, self.offered)
            if found.calls:
                self.calls += found.calls
                return found.text, self.calls
        return held, self.calls

    def _show(self, text: str, shown: list[str]) -> None:
        if self.calls:
            self.after += text
        else:
            shown.append(text)

    def _track_fence(self, line: str) -> None:
        if line.lstrip().startswith("```"):
            self.in_code = not self.in_code

    def _verdict(self, held: str) -> str:
        """'hold' (may still become a call), 'show' (cannot), 'call' (a complete block to parse)."""
        if not self.offered:
            return "show"
        start = held.lstrip(" \t")
        if not start:
            return "hold" if not held.endswith("\n") else "show"
        if self.in_code:
            return "show" if held.endswith("\n") or not start.startswith("`") else "hold"
        if start.startswith(("<tool_call>", "<|python_tag|>", "[TOOL_CALLS]")):
            return _tagged_state(start)
        if start.startswith("```"):
            return _fence_state(start)
        if start.startswith(("{", "[{")):
            return "call" if balanced(start) else "hold"
        if any(marker.startswith(start) for marker in PREFIX_MARKERS):
            return "hold"
        word = re.match(r"[A-Za-z_]\w*", start)
        if word and word.group(0) == start:  # an identifier so far: maybe tool_name(
            return "hold" if any(n.startswith(start) for n in self.offered) else "show"
        if word and start[len(word.group(0))] == "(" and word.group(0) in self.offered:
            return "call" if held.endswith("\n") else "hold"
        return "show"


def _line(text: str) -> str:
    return text + "\n" if text else ""


def _tagged_state(start: str) -> str:
    if start.startswith("<tool_call>"):
        return "call" if "</tool_call>" in start else "hold"
    return "hold"  # <|python_tag|> and [TOOL_CALLS] run to the end of the answer


def _fence_state(start: str) -> str:
    header, _, body = start.partition("\n")
    if not _:
        return "hold"  # the language is not known yet
    if header[3:].strip().lower() not in FENCE_LANGS:
        return "show"
    return "call" if "```" in body else "hold"
