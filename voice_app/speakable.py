"""An answer's Markdown as words to say: code blocks, math, images and HTML are left out, a
link is read as its text, list items and headings become sentences. The page does the same in
static/js/speech-text.js (the two follow one set of rules; tests check both)."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})[^\n]*\n.*?(?:^ {0,3}\1[ \t]*$|\Z)", re.M | re.S)
_DISPLAY_MATH = re.compile(r"\$\$.*?\$\$", re.S)
_INLINE_MATH = re.compile(r"(?<![\\$\w])\$(?=\S)[^$\n]+?(?<=\S)\$(?![\w$])")
_IMAGE = re.compile(r"!\[[^\]]*\]\([^)]*\)")
_LINK = re.compile(r"\[([^\]]+)\]\((?:[^()]|\([^)]*\))*\)|\[([^\]]+)\]\[[^\]]*\]")
_AUTOLINK = re.compile(r"<(https?://[^>\s]+)>")
_BARE_URL = re.compile(r"\bhttps?://[^\s<>)\]]+")
_HTML = re.compile(r"</?[A-Za-z][^>\n]*>")
_INLINE_CODE = re.compile(r"(`+)(.+?)\1")
_STRONG = re.compile(r"(\*\*|__|~~)(?=\S)(.+?)(?<=\S)\1")
_EMPHASIS = re.compile(r"(?<![\w*])([*_])(?=\S)(.+?)(?<=\S)\1(?![\w*])")
_HEADING = re.compile(r"^ {0,3}#{1,6}\s+(.*?)\s*#*\s*$")
_ITEM = re.compile(r"^\s*(?:[-*+]|\d{1,9}[.)])\s+(?:\[[ xX]\]\s+)?")
_QUOTE = re.compile(r"^\s*(?:>\s?)+")
_RULE = re.compile(r"^\s*(?:[-*_]\s*){3,}$")
_TABLE_RULE = re.compile(r"^\s*\|?\s*:?-{2,}:?\s*(?:\|\s*:?-{2,}:?\s*)*\|?\s*$")
_SENTENCE_END = re.compile(r"(?<=[.!?…])[\"'”’)\]]*\s+")
_TERMINAL = ".!?…:;"


def _host(match: re.Match) -> str:
    return urlsplit(match.group(1) if match.re is _AUTOLINK else match.group(0)).hostname or "a link"


def _line(line: str) -> str:
    """One line of Markdown as plain words (inline marks removed)."""
    line = _IMAGE.sub("", line)
    line = _LINK.sub(lambda m: m.group(1) or m.group(2), line)
    line = _AUTOLINK.sub(_host, line)
    line = _BARE_URL.sub(_host, line)
    line = _INLINE_CODE.sub(lambda m: m.group(2).strip(), line)
    line = _HTML.sub("", line)
    for _ in range(2):  # nested: **bold _and italic_**
        line = _STRONG.sub(r"\2", line)
        line = _EMPHASIS.sub(r"\2", line)
    return line.replace("\\", "").strip()


def _closed(text: str) -> str:
    """A heading or an item read as a sentence of its own (a pause after it)."""
    return text if not text or text[-1] in _TERMINAL else text + "."


def speakable(markdown: str) -> str:
    """The words of an answer, in paragraphs ("\\n\\n" between them)."""
    text = _FENCE.sub("\n", markdown.replace("\r\n", "\n"))
    text = _DISPLAY_MATH.sub(" ", text)
    text = _INLINE_MATH.sub(" ", text)
    paragraphs: list[str] = []
    current: list[str] = []

    def flush() -> None:
        if current:
            paragraphs.append(" ".join(current))
            current.clear()

    for raw in text.split("\n"):
        if not raw.strip() or _RULE.match(raw) or _TABLE_RULE.match(raw):
            flush()
            continue
        raw = _QUOTE.sub("", raw)
        heading = _HEADING.match(raw)
        if heading:
            flush()
            paragraphs.append(_closed(_line(heading.group(1))))
            continue
        if "|" in raw and raw.strip().startswith("|"):
            cells = [_line(c) for c in raw.strip().strip("|").split("|")]
            flush()
            paragraphs.append(_closed(", ".join(c for c in cells if c)))
            continue
        item = _ITEM.match(raw)
        if item:
            flush()
            current.append(_closed(_line(raw[item.end():])))
            flush()
            continue
        current.append(_line(raw))
    flush()
    return "\n\n".join(p for p in (" ".join(p.split()) for p in paragraphs) if p.strip(" .,"))


def sentences(text: str) -> list[str]:
    """Speakable text cut into sentences, in order."""
    out = []
    for paragraph in text.split("\n\n"):
        out.extend(s.strip() for s in _SENTENCE_END.split(paragraph) if s.strip())
    return out


def first_part(text: str, limit: int) -> str:
    """The sentences of `text` that fit in `limit` characters (at least the start of the first)."""
    taken, size = [], 0
    for sentence in sentences(text):
        if size + len(sentence) + 1 > limit:
            break
        taken.append(sentence)
        size += len(sentence) + 1
    return " ".join(taken) if taken else text[:limit]
