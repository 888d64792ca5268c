"""Word (.docx): the Title and Heading 1…n styles as sections, tables as rows ("Col A: v1; Col B:
v2", the first row naming the columns), each row one line under the table's section.

lxml's XML parser calls the target as it reads word/document.xml; no tree is built, so a
million empty elements or a paragraph of a million runs cost time, not memory, and the
inflated size is capped (a zip bomb stops at the cap)."""

from __future__ import annotations

import re
import zipfile
from pathlib import Path
from typing import Iterator

from ..chunker import PASSAGE_MAX, Block
from .common import HEADING_MAX, READ_SLICE, ExtractError, Outline, Progress, clean

W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
P, T, TAB, STYLE, VAL = f"{W}p", f"{W}t", f"{W}tab", f"{W}pStyle", f"{W}val"
TABLE, ROW, CELL = f"{W}tbl", f"{W}tr", f"{W}tc"
CELL_MAX = 1000  # characters of one cell kept
HEADER_CELLS = 256  # column names remembered (a wider table names the first ones)
ROW_MAX = PASSAGE_MAX * 2  # a longer row is handed on in pieces
_HEADING_STYLE = re.compile(r"heading\s*([1-9])")


def heading_level(style: str) -> int | None:
    """0 for Title, N for Heading N (the style's id, as Word and LibreOffice name it), else None."""
    name = style.lower()
    if name in ("title", "titel"):
        return 0
    found = _HEADING_STYLE.match(name)
    return int(found.group(1)) if found else None


class _Target:
    def __init__(self) -> None:
        self.out: list[Block] = []
        self.outline = Outline()
        self.depth = 0  # paragraphs open (text boxes nest them)
        self.style = ""
        self.in_text = False
        self.buffer: list[str] = []
        self.buffered = 0
        self.tables = 0  # tables open (a nested one is read into its cell)
        self.header: list[str] | None = None  # the table's first row
        self.rows = 0
        self.row: list[str] = []  # the row's parts so far
        self.row_size = 0
        self.cells = 0  # cells of the row so far
        self.cell: list[str] = []
        self.row_names: list[str] = []  # the first row's cells, as they come

    def _paragraph(self, paragraph_end: bool) -> None:
        text = clean("".join(self.buffer))
        self.buffer, self.buffered = [], 0
        if not text:
            return
        if self.tables:
            if sum(map(len, self.cell)) < CELL_MAX:
                self.cell.append(text)
            return
        level = heading_level(self.style) if paragraph_end else None
        if level is not None and len(text) <= PASSAGE_MAX:
            title = text[:HEADING_MAX]
            self.out.append(Block(title, {}, self.outline.enter(level, title), heading=True))
        else:
            self.out.append(Block(text, {}, self.outline.path))

    def _cell_done(self) -> None:
        value = clean(" ".join(self.cell))[:CELL_MAX]
        self.cell = []
        column = self.cells
        self.cells += 1
        if self.header is None:  # the first row: the columns' names (and a line of its own)
            if column < HEADER_CELLS:
                self.row_names.append(value)
        if not value:
            return
        name = self.header[column] if self.header is not None and column < len(self.header) else ""
        part = f"{name}: {value}" if name and name != value else value
        self.row.append(part)
        self.row_size += len(part) + 2
        if self.row_size > ROW_MAX:
            self._row_out()

    def _row_out(self) -> None:
        if self.row:
            self.out.append(Block("; ".join(self.row), {}, self.outline.path))
        self.row, self.row_size = [], 0

    def start(self, tag, attrib) -> None:
        if tag == P:
            if self.depth:
                self._paragraph(False)
            self.depth += 1
            self.style = ""
        elif tag == T:
            self.in_text = True
        elif tag == TAB and self.depth:
            self.buffer.append("\t")
        elif tag == STYLE and self.depth:
            self.style = attrib.get(VAL) or ""
        elif tag == TABLE:
            if self.depth:  # a table in a text box: its paragraph so far comes first
                self._paragraph(False)
            self.tables += 1
            if self.tables == 1:
                self.header, self.rows, self.row_names = None, 0, []
        elif tag == ROW and self.tables == 1:
            self.row, self.row_size, self.cells = [], 0, 0
            self.row_names = [] if self.header is None else self.row_names
        elif tag == CELL and self.tables == 1:
            self.cell = []

    def end(self, tag) -> None:
        if tag == T:
            self.in_text = False
        elif tag == P and self.depth:
            self._paragraph(True)
            self.depth -= 1
            self.style = ""
        elif tag == CELL and self.tables == 1:
            self._cell_done()
        elif tag == ROW and self.tables == 1:
            self._row_out()
            if self.header is None:
                self.header = self.row_names
            self.rows += 1
        elif tag == TABLE and self.tables:
            self.tables -= 1

    def data(self, data: str) -> None:
        if self.in_text and self.depth:
            self.buffer.append(data)
            self.buffered += len(data)
            if self.buffered > PASSAGE_MAX * 4:
                self._paragraph(False)

    def close(self) -> None:
        if self.buffer:
            self._paragraph(False)


class _Capped:
    """A stream that refuses to give more than `limit` bytes (an inflated zip member)."""

    def __init__(self, raw, limit: int) -> None:
        self.raw, self.limit, self.read_bytes = raw, limit, 0

    def read(self, size: int) -> bytes:
        data = self.raw.read(size)
        self.read_bytes += len(data)
        if self.read_bytes > self.limit:
            raise ExtractError(f"the DOCX's text inflates to more than {self.limit // (1024 * 1024)} MB "
                               "(a zip bomb, or a document to split into smaller files)")
        return data


def docx_blocks(path: Path, progress: Progress, xml_max: int) -> Iterator[Block]:
    from lxml import etree  # noqa: PLC0415

    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as exc:
        raise ExtractError("not a readable DOCX (not a zip archive); save it again from Word or LibreOffice") from exc
    with archive:
        try:
            info = archive.getinfo("word/document.xml")
        except KeyError:
            raise ExtractError("not a DOCX: it has no word/document.xml; save it as .docx from Word") from None
        if info.file_size > xml_max:
            raise ExtractError(f"the DOCX's text inflates to {info.file_size // (1024 * 1024)} MB, more than "
                               f"{xml_max // (1024 * 1024)} MB (a zip bomb, or a document to split into smaller files)")
        total = max(1, info.file_size)
        target = _Target()
        parser = etree.XMLParser(target=target, resolve_entities=False, no_network=True, load_dtd=False,
                                 huge_tree=False)
        try:
            with archive.open(info) as member:
                stream = _Capped(member, xml_max)
                while chunk := stream.read(READ_SLICE):
                    parser.feed(chunk)
                    yield from target.out
                    target.out.clear()
                    progress(min(1.0, stream.read_bytes / total))
            parser.close()
            yield from target.out
        except etree.XMLSyntaxError as exc:
            raise ExtractError(f"the DOCX's text is broken XML ({str(exc)[:200]}); save it again from Word") from exc
        except (zipfile.BadZipFile, EOFError, OSError) as exc:
            raise ExtractError(f"the DOCX archive is damaged ({exc}); save it again from Word") from exc
