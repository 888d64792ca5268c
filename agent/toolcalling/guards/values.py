"""Slip: a value worked out in a small model's head — a total or a count written into a file
(`computed_numbers`: it becomes a program that prints it, `compute_brief`), or a program's printed
value left out of the answer (`unstated_output`: shown under it).
"""

from __future__ import annotations

import re

from agent.llm.messages import ChatMessage
from agent.toolcalling import toolselect
from agent.toolcalling.guards.programs import NUMBER, NUMBER_FREE, THOUSANDS

_MONTH = r"(?:jan|feb|mar|apr|may|jun|jul|aug|sep|sept|oct|nov|dec)[a-z]*\.?"
_DATE_LIKE = re.compile(r"\b\d{4}-\d{2}-\d{2}\b|\b\d{1,2}:\d{2}(?::\d{2})?\b|\b\d{1,2}(?:st|nd|rd|th)?\s+" + _MONTH
                        + r"(?:\s+\d{4})?\b|\b" + _MONTH + r"\s+\d{1,2}(?:st|nd|rd|th)?(?:,?\s+\d{4})?\b", re.I)
VALUE_CHARS = 120  # a file's text this short that holds a number nobody gave is a computed value


def computed_numbers(text: str, said: str) -> list[str]:
    """The numbers of a short text for a file (at most VALUE_CHARS) that nobody gave: not in
    `said` (the request, today's date, this turn's results), and not one a sentence uses by the
    way (below NUMBER_FREE) unless the text is that number alone. Such a number was worked out
    in the model's head: asked to add up a column of hours, Qwen2.5-Coder-0.5B wrote 27 where
    the total was 37.5."""
    text = THOUSANDS.sub("", text or "").strip()
    if not text or len(text) > VALUE_CHARS:
        return []
    text = _DATE_LIKE.sub(" ", text).strip() or "-"  # a date or a time is no value worked out
    known = {float(n) for n in NUMBER.findall(THOUSANDS.sub("", said or ""))}
    alone = bool(re.fullmatch(r"[-+]?\d+(?:\.\d+)?", text))
    return [n for n in NUMBER.findall(text) if float(n) not in known and (alone or float(n) >= NUMBER_FREE)]


COMPUTE_BRIEF = (
    "Write a short Python 3 program that works out what my request needs written into {path} and print()s "
    "exactly that text. It runs in the folder that holds my files (open them by name{tables}). It must not write any file."
)
# Said only where the request names a table: told it for poem.txt, the 0.5B model counted words with csv.DictReader.
COMPUTE_TABLES = "; a .csv file's first line names its columns: read it with csv.DictReader"


def compute_brief(path: str, request: str) -> str:
    tables = any(name.lower().endswith((".csv", ".tsv")) for name in toolselect.file_names(request))
    return COMPUTE_BRIEF.format(path=path, tables=COMPUTE_TABLES if tables else "")


OUTPUT_SHOWN_CHARS = 200  # of a program's printed output shown under an answer that left it out
_EXIT_OK = "[exit code 0]"
_TOKEN = re.compile(r"[^\s,;:()\[\]{}'\"`]+")


def unstated_output(context: list[ChatMessage], answer: str, tools: set[str] | frozenset[str]) -> str:
    """What the turn's last call printed when it ran a program of `tools` (code_exec), worked and
    printed a little, and the answer does not state it ("The code computes the sum and prints the
    result. The exit code is 0.", from Qwen2.5-Coder-0.5B): shown under the answer, so the owner
    sees the value their request was for. "" otherwise (a number written 76,205,685 is stated)."""
    last = next((m for m in reversed(context) if m.role in ("tool", "user") and not m.is_summary), None)
    if last is None or last.role != "tool" or last.name not in tools:
        return ""
    said = THOUSANDS.sub("", answer or "").lower()
    start = max((i for i, m in enumerate(context) if m.role == "user" and not m.is_summary), default=-1)
    outputs = [_printed(m.content or "") for m in context[start + 1:] if m.role == "tool" and m.name in tools]
    if any(out and all(token.lower() in said for token in _TOKEN.findall(out)) for out in outputs):
        return ""  # the answer states what one of the turn's programs printed (an earlier one, maybe)
    out = _printed(last.content or "")
    if not out or len(out) > OUTPUT_SHOWN_CHARS or out.count("\n") > 2:
        return ""
    return out


def output_note(output: str) -> str:
    """The line under the answer that shows a program's output, always as code: what a program
    printed (a page's or a file's text, maybe) is never rendered as a link, an image or markup."""
    if "\n" not in output and "`" not in output:
        return f"\n\nThe program printed: `{output}`"
    return "\n\nThe program printed:\n\n    " + output.replace("\n", "\n    ")


def _printed(content: str) -> str:
    """What a program that ran cleanly printed ("" for a failed or cut run, or one with stderr)."""
    lines = content.split("\n")
    if lines[-1] != _EXIT_OK or content.startswith(("ERROR:", "[UNTRUSTED DATA")):
        return ""
    out = "\n".join(lines[:-1]).strip()
    return "" if "[stderr]" in out or "[truncated" in out else out
