"""HTML: h1–h6 as sections, a <pre> kept whole as code, navigation, page chrome and scripts left
out (nav, header, footer, aside, a Sphinx sidebar, its "¶" header links).

lxml's HTML parser (libxml2: linear, where html.parser is quadratic on an unclosed tag) calls the
target as it reads; no tree is built."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

from ..chunker import PASSAGE_MAX, Block
from .common import HEADING_MAX, READ_SLICE, Outline, Progress, clean, clean_code

BLOCKS = {"p", "div", "li", "tr", "br", "section", "article", "blockquote", "pre", "table", "ul", "ol", "dd", "dt",
          "td", "th", "main", "hr", "figure", "figcaption", "body", "details", "summary", "dl", "caption"}
HEADINGS = {"h1": 1, "h2": 2, "h3": 3, "h4": 4, "h5": 5, "h6": 6}
SKIPPED = {"script", "style", "template", "noscript", "svg", "head", "title", "nav", "header", "footer", "aside",
           "button", "select", "iframe", "object", "math"}
SKIPPED_ROLES = {"navigation", "banner", "contentinfo", "search", "complementary"}
SKIPPED_CLASSES = {"headerlink", "sphinxsidebar", "related", "footer", "navigation", "nav", "breadcrumbs",
                   "toc", "sidebar", "skip-link", "visually-hidden", "sr-only"}
VOID = {"br", "hr", "img", "input", "meta", "link", "area", "base", "col", "embed", "source", "track", "wbr"}
DEPTH_MAX = 4096  # open elements remembered (deeper ones are read as their parent)
LOOKBACK = 16  # an end tag closes an element at most this far up


class _Target:
    def __init__(self) -> None:
        self.out: list[Block] = []
        self.outline = Outline()
        self.stack: list[tuple[str, bool]] = []  # (tag, skipped) of the open elements
        self.skipping = 0  # open skipped elements
        self.overflow = 0  # elements opened past DEPTH_MAX
        self.level = 0  # the heading being read, 0 outside one
        self.pre = 0  # open <pre>s
        self.buffer: list[str] = []
        self.buffered = 0

    def _flush(self) -> None:
        raw = "".join(self.buffer).replace("¶", "")
        self.buffer, self.buffered = [], 0
        if self.level:
            return
        text = clean_code(raw) if self.pre else clean(raw.replace("\n", " "))  # source line breaks are not the page's
        if text:
            self.out.append(Block(text, {}, self.outline.path, code=bool(self.pre)))

    def start(self, tag, attrib) -> None:
        tag = tag.lower() if isinstance(tag, str) else ""
        skipped = tag in SKIPPED
        if attrib and not skipped:
            classes = attrib.get("class")
            skipped = (attrib.get("role") in SKIPPED_ROLES or "hidden" in attrib
                       or bool(classes and not SKIPPED_CLASSES.isdisjoint(classes.split())))
        if tag not in VOID:
            if len(self.stack) >= DEPTH_MAX:
                self.overflow += 1
                return
            self.stack.append((tag, skipped))
            self.skipping += skipped
        if self.skipping or skipped:
            return
        if tag in HEADINGS and not self.level:
            self._flush()
            self.level = HEADINGS[tag]
        elif tag in BLOCKS and not self.level:
            self._flush()
            self.pre += tag == "pre"

    def end(self, tag) -> None:
        tag = tag.lower() if isinstance(tag, str) else ""
        if tag in VOID or not self.stack:
            if tag in BLOCKS and not self.skipping and not self.level:
                self._flush()
            return
        if self.overflow:
            self.overflow -= 1
            return
        if self.stack[-1][0] == tag:
            self.skipping -= self.stack.pop()[1]
        elif all(t != tag for t, _ in self.stack[-LOOKBACK:]):
            return  # a stray end tag (libxml2 mends most of them before they come here)
        else:
            while self.stack:
                opened, skipped = self.stack.pop()
                self.skipping -= skipped
                if opened == tag:
                    break
        if self.skipping:
            return
        if tag in HEADINGS and self.level == HEADINGS[tag]:
            title = clean("".join(self.buffer).replace("¶", ""))[:HEADING_MAX]
            self.buffer, self.buffered, level, self.level = [], 0, self.level, 0
            if title:
                self.out.append(Block(title, {}, self.outline.enter(level, title), heading=True))
        elif tag in BLOCKS and not self.level:
            self._flush()
            self.pre = max(0, self.pre - (tag == "pre"))

    def data(self, data: str) -> None:
        if self.skipping:
            return
        self.buffer.append(data)
        self.buffered += len(data)
        if self.buffered > PASSAGE_MAX * 4:  # text without any tag: keep the buffer bounded
            if self.level:
                self.buffer = ["".join(self.buffer)[:HEADING_MAX * 2]]
                self.buffered = len(self.buffer[0])
            else:
                self._flush()

    def comment(self, text) -> None:
        pass

    def close(self) -> None:
        self.level = 0
        self._flush()


def html_blocks(path: Path, progress: Progress) -> Iterator[Block]:
    from lxml import etree  # noqa: PLC0415 - the parser child imports it only for HTML and DOCX

    size = max(1, path.stat().st_size)
    target = _Target()
    parser = etree.HTMLParser(target=target, recover=True, no_network=True, remove_comments=True, remove_pis=True,
                              huge_tree=True)  # deep nesting is read, not refused (memory is the child's limit)
    with open(path, encoding="utf-8", errors="replace") as f:
        while chunk := f.read(READ_SLICE):
            parser.feed(chunk)
            yield from target.out
            target.out.clear()
            progress(min(1.0, f.buffer.tell() / size))
    parser.close()
    yield from target.out
