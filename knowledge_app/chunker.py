"""Blocks to passages: a document read as blocks (a heading, a paragraph, a code block, a table
row), each under its heading path, is cut into passages that follow the sections.

A passage starts with its section's heading and holds whole blocks up to PASSAGE_CHARS; a longer
section goes on in the next passage, which repeats the last sentences of the one before (at
most OVERLAP characters, whole sentences), so a sentence is never cut and an answer that spans a
boundary is whole in one of the two. A code block stays whole up to PASSAGE_MAX. A passage under
MIN_CHARS (a heading with nothing under it, a two-word section) joins the next one under the
same parent, or else the one before. Memory is bounded by a section's open passage, whatever
the file. No Django: this runs in the parser child.
"""

from __future__ import annotations

import re
from typing import Iterator

# Chosen by bench/passage_split.py (answer-holding passage recall, 30 questions): 700 characters
# found fewer answers; 1 000 and 1 200, with an overlap of 0, 100 or 200, were within a question or
# two of each other. 1 000 fits all-MiniLM-L6-v2's 256 tokens (a longer passage's end is never
# seen by its vector), and 200 holds a sentence or two (with 100 most sentences do not fit: no overlap).
PASSAGE_CHARS = 1000  # a passage ends at the block (or sentence) that would take it past this
PASSAGE_MAX = 1600  # a code block longer than this is cut at lines
OVERLAP = 200  # characters of whole sentences a section's next passage repeats
MIN_CHARS = 60  # a smaller passage joins its neighbour
PIECE_MIN = 200  # a run without sentence ends is cut to fill a passage, in pieces of at least this
SEPARATOR = " › "  # between the headings of a section path
_SENTENCE_END = re.compile(r"(?<=[.!?;])\s+")


class Block:
    """A unit of text read from a document: `path` is its section's heading path; a heading
    block starts that section; a code block is kept whole and cut only at lines. (A plain class:
    the parser child makes one per paragraph and starts once per document, so it stays cheap.)"""

    __slots__ = ("text", "location", "path", "heading", "code")

    def __init__(self, text: str, location: dict | None = None, path: tuple[str, ...] = (), heading: bool = False,
                 code: bool = False) -> None:
        self.text, self.location, self.path, self.heading, self.code = text, location or {}, path, heading, code

    def __repr__(self) -> str:
        return f"Block({self.text[:40]!r}, {self.location}, {self.path}, heading={self.heading}, code={self.code})"


class _Passage:
    __slots__ = ("text", "location", "path")

    def __init__(self, text: str, location: dict, path: tuple[str, ...]) -> None:
        self.text, self.location, self.path = text, location, path


def section_location(location: dict, path: tuple[str, ...]) -> dict:
    """`location` with the section path (and its last heading, as before) when there is one."""
    found = {k: v for k, v in location.items() if v not in ("", None)}
    if path:
        found["heading"] = path[-1]
        found["section"] = SEPARATOR.join(path)
    return found


def _sentences(text: str) -> list[str]:
    return [s for s in _SENTENCE_END.split(text) if s]


def _cut(text: str, limit: int, code: bool) -> list[str]:
    """A block longer than `limit` as pieces of at most `limit`: at sentences (code: lines),
    and a sentence or line longer still at spaces."""
    if len(text) <= limit:
        return [text]
    units = text.split("\n") if code else _sentences(text)
    joiner = "\n" if code else " "
    pieces, current = [], ""
    for unit in units:
        while len(unit) > limit:  # one sentence longer than a passage: cut at a space
            at = unit.rfind(" ", limit // 2, limit)
            at = at if at > 0 else limit
            if current:
                pieces.append(current)
                current = ""
            pieces.append(unit[:at])
            unit = unit[at:].lstrip()
        if current and len(current) + len(joiner) + len(unit) > limit:
            pieces.append(current)
            current = unit
        else:
            current = f"{current}{joiner}{unit}" if current else unit
    if current:
        pieces.append(current)
    return pieces


class _Section:
    """The open passage of one section, handed out as it fills. A block too long for the room
    left goes in sentence by sentence (a code block whole, up to PASSAGE_MAX)."""

    def __init__(self, head: Block | None, path: tuple[str, ...], location: dict) -> None:
        self.head = head.text if head else ""
        self.path = path
        self.location = location  # the heading's, for a passage of the heading alone
        self.items: list[tuple[str, dict, int]] = []  # (text, location, block number; -1: code)
        self.size = len(self.head)
        self.fresh = 0  # items not repeated from the passage before
        self.emitted = False
        self.blocks = 0

    def add(self, block: Block) -> Iterator[_Passage]:
        self.blocks += 1
        number = -1 if block.code else self.blocks
        if block.code or self.size + len(block.text) <= PASSAGE_CHARS:
            for unit in _cut(block.text, PASSAGE_MAX, block.code):
                yield from self._put(unit, block.location, number)
            return
        for sentence in _sentences(block.text):
            while len(sentence) > PASSAGE_CHARS - len(self.head):  # no sentence end in sight: cut to fill the passage
                if self.fresh and PASSAGE_CHARS - self.size < PIECE_MIN:
                    yield self._passage()
                    self._start_after()
                room = max(PASSAGE_CHARS - self.size, PIECE_MIN)
                at = max(sentence.rfind(" ", room // 2, room), sentence.rfind("\n", room // 2, room))
                at = at if at > 0 else room
                yield from self._put(sentence[:at], block.location, number)
                sentence = sentence[at:].lstrip()
            if sentence:
                yield from self._put(sentence, block.location, number)

    def _put(self, unit: str, location: dict, number: int) -> Iterator[_Passage]:
        if self.fresh and self.size + len(unit) > PASSAGE_CHARS:
            yield self._passage()
            self._start_after()
        self.items.append((unit, location, number))
        self.size += len(unit) + 1
        self.fresh += 1

    def close(self) -> Iterator[_Passage]:
        if self.fresh or (self.head and not self.emitted):
            yield self._passage()

    def _passage(self) -> _Passage:
        parts = [self.head] if self.head else []
        last = None
        for text, _, number in self.items:  # sentences of one block go on one line
            if parts and number == last and number != -1:
                parts[-1] += " " + text
            else:
                parts.append(text)
            last = number
        location = self.location if not self.emitted or not self.items else self.items[0][1]
        self.emitted = True
        return _Passage("\n".join(parts), location, self.path)

    def _start_after(self) -> None:
        """The next passage of this section, starting with the last whole sentences of this one."""
        items = self.items
        self.items, self.size, self.fresh = [], len(self.head), 0
        tail: list[tuple[str, dict, int]] = []
        for text, location, number in reversed(items):
            if number == -1:
                break  # code is not repeated
            sentences = _sentences(text)
            while sentences and sum(len(t) + 1 for t, _, _ in tail) + len(sentences[-1]) <= OVERLAP:
                tail.insert(0, (sentences.pop(), location, number))
            if sentences:
                break
        self.items = tail
        self.size += sum(len(t) + 1 for t, _, _ in tail)


def _raw_passages(blocks: Iterator[Block]) -> Iterator[_Passage]:
    section: _Section | None = None
    for block in blocks:
        page = block.location.get("page")
        if block.heading or section is None or block.path != section.path or page != section.location.get("page"):
            if section is not None:
                yield from section.close()
            section = _Section(block if block.heading else None, block.path, block.location)
            if block.heading:
                continue
        if block.text:
            yield from section.add(block)
    if section is not None:
        yield from section.close()


def _common(a: tuple[str, ...], b: tuple[str, ...]) -> tuple[str, ...]:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return a[:n]


def _join(first: _Passage, then: _Passage) -> _Passage:
    """Two neighbours as one passage: where the first starts, under the deeper path when the
    second is inside the first's section, else under what they share."""
    path = then.path if then.path[: len(first.path)] == first.path else _common(first.path, then.path)
    return _Passage(f"{first.text}\n{then.text}", first.location, path)


def _same_page(a: _Passage | None, b: _Passage) -> bool:
    return a is not None and a.location.get("page") == b.location.get("page")


def _merged_small(raw: Iterator[_Passage]) -> Iterator[_Passage]:
    """Passages under MIN_CHARS joined with the next under the same parent (else the one before)."""
    previous: _Passage | None = None  # held back: a small one after it may join it
    small: _Passage | None = None
    for passage in raw:
        if small is not None:
            same_parent = passage.path[: max(0, len(small.path) - 1)] == small.path[:-1]
            if (same_parent or not _same_page(previous, small)) and _same_page(small, passage):
                passage = _join(small, passage)
            elif _same_page(previous, small):
                previous = _join(previous, small)
            else:  # a page of its own (a PDF's cover): never cited as another page
                if previous is not None:
                    yield previous
                previous = small
            small = None
        if len(passage.text) < MIN_CHARS:
            small = passage
            continue
        if previous is not None:
            yield previous
        previous = passage
    if small is not None:
        if _same_page(previous, small):
            previous = _join(previous, small)
        else:
            if previous is not None:
                yield previous
            previous = small
    if previous is not None:
        yield previous


def passages(blocks: Iterator[Block]) -> Iterator[tuple[str, dict]]:
    """The document's passages in order: (text, location with its section)."""
    for passage in _merged_small(_raw_passages(blocks)):
        yield passage.text, section_location(passage.location, passage.path)


def embedding_text(name: str, location: dict, text: str) -> str:
    """What a passage's vector is made from: its document's title and section path, then its
    text ("flask › Tutorial › Blog Blueprint\\n\\n…"), so the vector knows where it sits."""
    title = re.sub(r"[_-]+", " ", name.rsplit(".", 1)[0]).strip()
    section = str(location.get("section") or "")
    if title and section.casefold().startswith(title.casefold()):
        title = ""  # the document's own title heads its sections already
    where = SEPARATOR.join(part for part in (title, section) if part)
    return f"{where}\n\n{text}" if where else text
