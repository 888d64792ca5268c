"""What every format's reader shares: the error that says what to do, text cleaning, the
heading outline, and reading a text file's lines in bounded memory."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Callable, Iterator

READ_SLICE = 64 * 1024
BLOCK = 1024 * 1024  # text read this much at a time; only lines with something on them cost a step
HEADING_MAX = 200
DEPTH_MAX = 12  # heading levels kept in a path (a deeper one replaces the last)
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ufffe\uffff]")
_SPACES = re.compile(r"[ \t\u00a0]+")
_FILLED_LINE = re.compile(r"[^\n]*\S[^\n]*")

Progress = Callable[[float], None]  # fraction of the file read so far


class ExtractError(Exception):
    """The file cannot be read: the message says why and what to do."""


def clean(text: str) -> str:
    """Control characters out, runs of spaces one space."""
    return _SPACES.sub(" ", _CONTROL.sub(" ", text)).strip()


def clean_code(text: str) -> str:
    """A code block's lines cleaned one by one, their indentation and line breaks kept."""
    lines = [_CONTROL.sub(" ", line).rstrip() for line in text.split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    while lines and not lines[0]:
        lines.pop(0)
    return "\n".join(lines)


class Outline:
    """The headings above the current point: a heading of level N closes those of N and deeper."""

    def __init__(self) -> None:
        self.levels: list[int] = []
        self.titles: list[str] = []

    def enter(self, level: int, title: str) -> tuple[str, ...]:
        while self.levels and self.levels[-1] >= level:
            self.levels.pop()
            self.titles.pop()
        if len(self.levels) >= DEPTH_MAX:
            self.levels.pop()
            self.titles.pop()
        self.levels.append(level)
        self.titles.append(title[:HEADING_MAX])
        return self.path

    @property
    def path(self) -> tuple[str, ...]:
        return tuple(self.titles)


def filled_lines(path: Path, progress: Progress) -> Iterator[tuple[int, str]]:
    """(line number, line) of each line with text, as written (indentation kept, tabs as 8
    spaces). Blank lines are skipped in C (a file of 190 MB of newlines is one regex scan), and
    a line longer than READ_SLICE comes in slices of it (a 100 MB line is never one string)."""
    size = max(1, path.stat().st_size)
    line_no, carry = 0, ""  # line_no: lines before `complete`
    with open(path, encoding="utf-8", errors="replace", newline=None) as f:
        while True:
            block = f.read(BLOCK)
            pending = carry + block
            if block:
                cut = pending.rfind("\n") + 1
                complete, carry = pending[:cut], pending[cut:]
            else:
                complete, carry = pending, ""
            at, number = 0, line_no
            for found in _FILLED_LINE.finditer(complete):
                number += complete.count("\n", at, found.start())
                at = found.start()
                line = found.group()
                for i in range(0, len(line), READ_SLICE):
                    yield number + 1, line[i:i + READ_SLICE].expandtabs(8)
            line_no += complete.count("\n")
            while len(carry) > READ_SLICE:  # a line without an end in sight: its slices now, the rest later
                yield line_no + 1, carry[:READ_SLICE]
                carry = carry[READ_SLICE:]
            progress(min(1.0, f.buffer.tell() / size))
            if not block:
                return
