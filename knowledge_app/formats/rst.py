"""reStructuredText (`.rst`, and `.txt` written in it), read line by line as docutils would lay
it out, without docutils: headings by their adornment (levels in order of first appearance),
directives by kind, literal blocks as code, inline markup as the words a reader sees.

Nothing is ever executed or opened: `include`, `literalinclude`, `raw`, `csv-table :file:` and
the like are dropped with their bodies, so a document cannot make the parser read another file.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Iterator

from ..chunker import Block
from .common import HEADING_MAX, Outline, Progress, clean, clean_code, filled_lines
from .text import GAP_LINES_MAX, PARAGRAPH_MAX

SNIFF_BYTES = 64 * 1024
ADORNMENTS = "=-~^\"'*+#`"
_ADORNMENT = re.compile(r"^([" + re.escape(ADORNMENTS) + r"])\1+\s*$")
_DIRECTIVE = re.compile(r"^\.\.\s+([\w.:-]+?)::(?:\s+(.*))?$")
_TARGET = re.compile(r"^\.\.\s+(?:_|\|)")  # `.. _label:`, `.. __:`, `.. |name| replace:: …`
_FOOTNOTE = re.compile(r"^\.\.\s+\[[^\]]+\](?:\s+(.*))?$")
_OPTION = re.compile(r"^:[\w-]+:(?:\s|$)")
_ITEM = re.compile(r"^(?:[-*+•]\s|#\.\s|\d{1,9}[.)]\s|\(\w{1,3}\)\s|:[\w ]+:\s|\|\s)")
TABLE_RULE = frozenset("=+-|: ")  # a table's border: "=====  =====", "+----+----+"
_ROLE_TARGET = re.compile(r"^(.*?)\s*<[^<>]*>$", re.DOTALL)
_INLINE = re.compile(
    r"``(?P<lit>.+?)``"
    r"|(?::[\w.+-]+)+:`(?P<role>[^`]*)`"
    r"|`(?P<ref>[^`]+)`(?:__?)?"
    r"|\*\*(?P<strong>[^*]+?)\*\*"
    r"|(?<![\w*\\])\*(?P<em>[^\s*](?:[^*]*?[^\s*\\])?)\*(?![\w*])"
    r"|\s?\[(?:#[\w-]*|\d+|\*)\]_"
    r"|\|(?P<sub>\w(?:[\w .-]*\w)?)\|(?:__?)?"
    r"|\\ "
)
DROPPED = {  # directives whose words are not the document's (or would read another file)
    "toctree", "include", "literalinclude", "raw", "image", "contents", "index", "highlight", "currentmodule",
    "default-role", "role", "meta", "sectionauthor", "moduleauthor", "codeauthor", "tabularcolumns", "testsetup",
    "testcleanup", "default-domain", "autosummary", "automodule", "autoclass", "autofunction", "automethod",
    "autoattribute", "autodata", "autoexception", "program", "sectnum", "header", "footer", "target-notes",
    "spelling:word-list", "graphviz", "plot", "math", "title", "unicode", "date", "replace", "cssclass",
}
CODE = {"code-block", "code", "sourcecode", "doctest", "testcode", "testoutput", "productionlist", "parsed-literal",
        "console", "snippet", "prompt", "ipython", "jinja"}
ADMONITIONS = {"note": "Note:", "warning": "Warning:", "tip": "Tip:", "hint": "Hint:", "important": "Important:",
               "caution": "Caution:", "danger": "Danger:", "attention": "Attention:", "error": "Error:",
               "seealso": "See also:", "todo": "To do:"}
VERSIONS = {"versionadded": "New in", "versionchanged": "Changed in", "deprecated": "Deprecated since",
            "versionremoved": "Removed in"}


def inline(text: str) -> str:
    """reST's inline markup as the words it shows: :class:`~a.Model` → Model, :ref:`text <label>`
    → text, ``literal`` → literal, `link <url>`_ → link, **bold**, *em* → their words."""
    def keep(match: re.Match) -> str:
        if (found := match.group("lit")) is not None:
            return found
        if (found := match.group("role")) is not None:
            found = found.lstrip("!")
            if target := _ROLE_TARGET.match(found):
                return target.group(1) or found
            return found[1:].rpartition(".")[2] if found.startswith("~") else found
        if (found := match.group("ref")) is not None:
            target = _ROLE_TARGET.match(found)
            return (target.group(1) or found) if target else found
        for name in ("strong", "em", "sub"):
            if (found := match.group(name)) is not None:
                return found
        return ""

    return _INLINE.sub(keep, text)


def _adornment(line: str) -> str | None:
    """The character of an adornment line (a heading's over- or underline), else None."""
    found = _ADORNMENT.match(line)
    return found.group(1) if found else None


def looks_like_rst(path: Path) -> bool:
    """Is this .txt written in reST? Underlined headings with a directive, a target, a role, or
    with a second heading, in its first SNIFF_BYTES."""
    with open(path, encoding="utf-8", errors="replace") as f:
        head = f.read(SNIFF_BYTES)
    lines = head.split("\n")
    headings = marks = 0
    for before, line in zip(lines, lines[1:]):
        title = before.rstrip()
        if title and not title[0].isspace() and not _adornment(title) and _adornment(line) and len(line.rstrip()) >= len(title):
            headings += 1
        if _DIRECTIVE.match(line.strip()) or _TARGET.match(line.strip()):
            marks += 1
    marks += len(re.findall(r":[\w:.-]+:`[^`\n]+`", head))
    return headings >= 1 and (marks >= 1 or headings >= 2)


class _Reader:
    """One pass over the filled lines; blocks come out as each paragraph, code block or heading ends."""

    def __init__(self) -> None:
        self.outline = Outline()
        self.styles: list[tuple[str, bool]] = []  # adornment styles in order of first appearance: their levels
        self.lines: list[str] = []
        self.raw_count = 0
        self.first = self.last = self.size = 0
        self.indent = 0  # the paragraph's
        self.prefix = ""  # "Note:" for the next paragraph of an admonition's body
        self.prefix_over = -1  # … when that paragraph is indented more than this
        self.drop_over: int | None = None  # lines indented more than this are dropped (a comment, a toctree)
        self.options_over: int | None = None  # ':name: value' lines right under a directive are its options
        self.code_over: int | None = None  # lines indented more than this are code
        self.code: list[str] = []
        self.code_first = 0
        self.code_base: int | None = None
        self.code_last = 0
        self.literal_after: int | None = None  # a paragraph ended with '::': an indented block after it is code
        self.overline: tuple[str, int] | None = None  # (char, length) of a line that may be a title's overline
        self.title: tuple[int, str] | None = None  # the line after that overline

    # --- output
    def paragraph(self) -> Iterator[Block]:
        if self.lines:
            text = "\n".join(t for t in (clean(inline(line)) for line in self.lines) if t)
            if text:
                yield Block(text, {"line": self.first}, self.outline.path)
        self.lines, self.raw_count, self.size = [], 0, 0

    def code_block(self) -> Iterator[Block]:
        if text := clean_code("\n".join(self.code)):
            yield Block(text, {"line": self.code_first}, self.outline.path, code=True)
        self.code, self.code_base = [], None

    def heading(self, title: str, style: tuple[str, bool], number: int) -> Iterator[Block]:
        text = clean(inline(title))[:HEADING_MAX]
        if not text:
            return
        if style not in self.styles:
            self.styles.append(style)
        path = self.outline.enter(self.styles.index(style), text)
        yield Block(text, {"line": number}, path, heading=True)

    # --- input
    def line(self, number: int, raw: str) -> Iterator[Block]:
        gap = number > self.last + 1
        indent = len(raw) - len(raw.lstrip())
        text = raw.strip()
        self.last = max(self.last, number)
        if self.drop_over is not None:
            if indent > self.drop_over:
                return
            self.drop_over = None
        if self.options_over is not None:
            if indent > self.options_over and not gap and _OPTION.match(text):
                return
            self.options_over = None
        if self.code_over is not None:
            if indent > self.code_over:
                if self.code_base is None:
                    self.code_base, self.code_first = indent, number
                elif gap:
                    self.code.extend([""] * min(GAP_LINES_MAX, number - self.code_last - 1))
                self.code.append(raw[min(indent, self.code_base):].rstrip())
                self.code_last = number
                if sum(map(len, self.code)) > PARAGRAPH_MAX * 2:
                    yield from self.code_block()
                return
            yield from self.code_block()
            self.code_over = None
        if self.literal_after is not None:
            if gap and indent > self.literal_after:
                yield from self.paragraph()
                self.code_over, self.literal_after, self.code_last = self.literal_after, None, number
                yield from self.line(number, raw)
                return
            self.literal_after = None
        if self.overline is not None:
            yield from self._after_overline(number, raw, gap, text)
            return
        yield from self._plain(number, raw, gap, indent, text)

    def _after_overline(self, number: int, raw: str, gap: bool, text: str) -> Iterator[Block]:
        char, _ = self.overline
        if self.title is None:
            if not gap and text and not _adornment(text):
                self.title = (number, text)
                return
            self.overline = None  # a transition, not an overline
            yield from self._plain(number, raw, gap, len(raw) - len(raw.lstrip()), text)
            return
        (title_number, title), self.overline, self.title = self.title, None, None
        if not gap and _adornment(text) == char:
            yield from self.heading(title, (char, True), title_number)
            return
        yield from self._plain(title_number, title, False, 0, title)
        yield from self.line(number, raw)

    def _plain(self, number: int, raw: str, gap: bool, indent: int, text: str) -> Iterator[Block]:
        if indent == 0 and (char := _adornment(text)):
            title = self.lines[0] if self.lines else ""
            if (not gap and self.raw_count == 1 and self.indent == 0 and len(title) <= HEADING_MAX
                    and len(text) >= min(3, len(title)) and not self.prefix):
                start = self.first
                self.lines, self.raw_count, self.size = [], 0, 0
                yield from self.heading(title, (char, False), start)
                return
            yield from self.paragraph()
            if gap or not title:
                self.overline = (char, len(text))
            return
        if text.startswith(".."):
            yield from self.paragraph()
            yield from self._explicit(number, indent, text)
            return
        if len(text) >= 3 and (" " in text or "+" in text) and set(text) <= TABLE_RULE:
            return
        if gap or indent < self.indent or (indent > self.indent and _ITEM.match(text)) or self.size > PARAGRAPH_MAX:
            yield from self.paragraph()  # (a deeper line right under one goes on it: a list item's, a term's)
        if not self.lines:
            self.first, self.indent = number, indent
            if self.prefix:
                if indent > self.prefix_over:
                    text = f"{self.prefix} {text}"
                else:  # the directive had no body: its words stand alone
                    yield Block(self.prefix.rstrip(":") + ".", {"line": number}, self.outline.path)
                self.prefix = ""
        if text.endswith("::"):
            self.literal_after = indent
            text = text[:-2].rstrip() if text == "::" or text.endswith(" ::") else text[:-1]
            if not text:
                return
        if not self.lines or _ITEM.match(text):
            self.lines.append(text)
        else:  # a wrapped line goes on the one before
            self.lines[-1] += " " + text
        self.raw_count += 1
        self.size += len(text)

    def _explicit(self, number: int, indent: int, text: str) -> Iterator[Block]:
        """A line starting with '..': a directive, a target, a substitution, a footnote or a comment."""
        found = _DIRECTIVE.match(text)
        if found is None:
            footnote = _FOOTNOTE.match(text)
            if footnote and footnote.group(1):
                yield from self._plain(number, footnote.group(1), True, indent, footnote.group(1))
                return
            if footnote is None:  # a target, a substitution definition or a comment: dropped with its body
                self.drop_over = indent
            return
        name, argument = found.group(1).lower(), (found.group(2) or "").strip()
        kind = name.rpartition(":")[2] if name not in DROPPED else name  # py:function → function
        self.options_over = indent
        if kind in DROPPED or name in DROPPED:
            self.drop_over = indent
        elif kind in CODE:
            self.code_over, self.code_last = indent, number
        elif kind in ADMONITIONS or kind in VERSIONS or kind == "admonition":
            if kind in VERSIONS:
                version, _, rest = argument.partition(" ")
                label, argument = f"{VERSIONS[kind]} {version}".strip() + ":", rest
            else:
                label = ADMONITIONS.get(kind) or (clean(inline(argument)) + ":")
                argument = "" if kind == "admonition" else argument
            if argument:
                yield from self._plain(number, f"{label} {argument}", True, indent + 1, f"{label} {argument}")
                self.indent = indent  # what follows, indented deeper, is the same body
            else:
                self.prefix, self.prefix_over = label, indent
        elif argument and kind not in ("only", "ifconfig", "container", "rst-class", "class", "figure", "hlist"):
            self.lines, self.first, self.indent = [argument], number, indent  # e.g. `.. attribute:: Field.null`
            self.raw_count, self.size = 2, len(argument)  # never a heading's title

    def close(self) -> Iterator[Block]:
        if self.code_over is not None:
            yield from self.code_block()
        if self.title is not None:
            yield from self._plain(self.title[0], self.title[1], False, 0, self.title[1])
        yield from self.paragraph()
        if self.prefix:
            yield Block(self.prefix.rstrip(":") + ".", {"line": self.last}, self.outline.path)


def rst_blocks(path: Path, progress: Progress) -> Iterator[Block]:
    reader = _Reader()
    for number, raw in filled_lines(path, progress):
        yield from reader.line(number, raw)
    yield from reader.close()
