"""Plain text (paragraphs) and Markdown (ATX and setext headings, fenced code kept whole, list
items and table rows one a line, inline markup as the words a reader sees)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Iterator

from ..chunker import PASSAGE_MAX, Block
from .common import HEADING_MAX, Outline, Progress, clean, clean_code, filled_lines

PARAGRAPH_MAX = PASSAGE_MAX * 2  # a paragraph without a blank line is handed on at a line past this
FRONT_MATTER_LINES = 60  # a "---" first line opens front matter of at most this many lines
GAP_LINES_MAX = 2  # blank lines kept inside a code block, however many there were
_ATX = re.compile(r"^ {0,3}(#{1,6})\s+(.+?)(?:\s+#+)?\s*$")
_SETEXT = re.compile(r"^ {0,3}(=+|-+)\s*$")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_ITEM = re.compile(r"^\s*(?:[-*+]\s|\d{1,9}[.)]\s|\|)")
_TABLE_RULE = re.compile(r"^\s*\|?\s*:?-{3,}:?\s*(?:\|\s*:?-{3,}:?\s*)*\|?\s*$")
_LINK_DEFINITION = re.compile(r"^ {0,3}\[[^\]]+\]:\s+\S+")  # "[name]: https://…", shown nowhere
_BREAK = re.compile(r"^ {0,3}([-*_])(?:\s*\1){2,}\s*$")
_INLINE = re.compile(
    r"!\[(?P<alt>[^\]\n]*)\]\([^)\n]*\)"  # an image: its alt text
    r"|\[(?P<link>[^\]\n]+)\]\([^)\n]*\)"  # a link: its text
    r"|\[(?P<ref>[^\]\n]+)\]\[[^\]\n]*\]"  # a reference link: its text
    r"|(?P<tick>`+)(?P<code>.+?)(?P=tick)"  # code: as written
    r"|\*\*(?P<strong>[^*\n]+?)\*\*|__(?P<strong2>[^_\n]+?)__"
    r"|(?<![\w*])\*(?P<em>[^\s*](?:[^*\n]*?[^\s*])?)\*(?![\w*])"
    r"|<!--.*?-->"
)


def inline(text: str) -> str:
    """Markdown's inline markup as the words it shows."""
    def keep(match: re.Match) -> str:
        for name in ("alt", "link", "ref", "code", "strong", "strong2", "em"):
            if match.group(name) is not None:
                return match.group(name)
        return ""

    return _INLINE.sub(keep, text)


def plain_blocks(path: Path, progress: Progress) -> Iterator[Block]:
    """Paragraphs (lines up to a blank one), each with its first line's number."""
    lines: list[str] = []
    first = last = size = 0
    for number, line in filled_lines(path, progress):
        if lines and (number > last + 1 or size > PARAGRAPH_MAX):
            yield Block("\n".join(lines), {"line": first})
            lines, size = [], 0
        if text := clean(line):
            if not lines:
                first = number
            lines.append(text)
            size += len(text) + 1
        last = number
    if lines:
        yield Block("\n".join(lines), {"line": first})


class _Markdown:
    def __init__(self) -> None:
        self.outline = Outline()
        self.lines: list[str] = []  # the paragraph's lines (a list item or table row starts a new one)
        self.first = self.last = self.size = 0
        self.fence = ""  # the open fence's marker, while in fenced code
        self.code: list[str] = []

    def paragraph(self) -> Iterator[Block]:
        if self.lines:
            text = "\n".join(clean(inline(line)) for line in self.lines)
            if text.strip():
                yield Block(text, {"line": self.first}, self.outline.path)
        self.lines, self.size = [], 0

    def code_block(self) -> Iterator[Block]:
        if text := clean_code("\n".join(self.code)):
            yield Block(text, {"line": self.first}, self.outline.path, code=True)
        self.code, self.size = [], 0

    def line(self, number: int, raw: str) -> Iterator[Block]:
        gap = number > self.last + 1
        if self.fence:
            if raw.lstrip().startswith(self.fence):
                self.fence = ""
                yield from self.code_block()
            else:
                self.code.extend([""] * min(GAP_LINES_MAX, number - self.last - 1))
                self.code.append(raw.rstrip())
                self.size += len(raw)
                if self.size > PARAGRAPH_MAX * 2:  # a fence never closed: handed on in pieces
                    yield from self.code_block()
                    self.first = number
            self.last = number
            return
        self.last = number
        if fence := _FENCE.match(raw):
            yield from self.paragraph()
            self.fence, self.first = fence.group(1), number
            return
        if len(raw) < 400 and (heading := _ATX.match(raw)):
            yield from self.paragraph()
            if title := clean(inline(heading.group(2)))[:HEADING_MAX]:
                yield Block(title, {"line": number}, self.outline.enter(len(heading.group(1)), title), heading=True)
            return
        if (setext := _SETEXT.match(raw)) and not gap and self.lines and self.size <= HEADING_MAX:
            title = clean(inline(" ".join(self.lines)))
            start, self.lines, self.size = self.first, [], 0
            if title:
                level = 1 if setext.group(1).startswith("=") else 2
                yield Block(title, {"line": start}, self.outline.enter(level, title), heading=True)
            return
        if _BREAK.match(raw) or _TABLE_RULE.match(raw) or _LINK_DEFINITION.match(raw):
            if gap:
                yield from self.paragraph()
            return
        if gap or self.size > PARAGRAPH_MAX:
            yield from self.paragraph()
        if not self.lines:
            self.first = number
        if not self.lines or _ITEM.match(raw):
            self.lines.append(raw.strip())
        else:  # a wrapped line goes on the one before
            self.lines[-1] += " " + raw.strip()
        self.size += len(raw)

    def close(self) -> Iterator[Block]:
        yield from self.code_block() if self.fence else self.paragraph()


def markdown_blocks(path: Path, progress: Progress) -> Iterator[Block]:
    reader = _Markdown()
    front_matter = False
    for number, raw in filled_lines(path, progress):
        if number == 1 and raw.strip() == "---":
            front_matter = True
            continue
        if front_matter and number <= FRONT_MATTER_LINES:  # YAML front matter: metadata, not the document's words
            front_matter = raw.strip() not in ("---", "...")
            reader.last = number
            continue
        yield from reader.line(number, raw)
    yield from reader.close()
