"""Documents to passages: each format read as a stream of (text, location) pieces, then joined
into passages of about PASSAGE_CHARS that keep where they came from.

Bounded work whatever the file: text is read in slices (a 100 MB line is never one string),
HTML is parsed by events without a tree, a PDF one page at a time, a DOCX's XML by events with
every finished paragraph freed and its inflated size capped (a zip bomb stops at the cap).
"""

from __future__ import annotations

import html.parser
import io
import re
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

PASSAGE_CHARS = 1000  # a passage ends at the first paragraph break past this
PASSAGE_MAX = 1600  # and is cut (at a space if it can) past this
READ_SLICE = 64 * 1024
DOCX_XML_MAX = 256 * 1024 * 1024  # inflated bytes of word/document.xml read at most
HEADING_MAX = 200
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ufffe\uffff]")
_SPACES = re.compile(r"[ \t\u00a0]+")
_MD_HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$")
KINDS = {
    ".txt": "text", ".text": "text", ".log": "text", ".csv": "text", ".rst": "text",
    ".md": "markdown", ".markdown": "markdown",
    ".html": "html", ".htm": "html", ".xhtml": "html",
    ".pdf": "pdf",
    ".docx": "docx",
}
SUPPORTED = "text (.txt), Markdown (.md), HTML (.html), PDF (.pdf) or Word (.docx)"


class ExtractError(Exception):
    """The file cannot be read: the message says why and what to do."""


Progress = Callable[[float], None]  # fraction of the file read so far


def kind_of(name: str) -> str | None:
    return KINDS.get(Path(name).suffix.lower())


def clean(text: str) -> str:
    """Control characters out, runs of spaces one space."""
    return _SPACES.sub(" ", _CONTROL.sub(" ", text)).strip()


# --- pieces ---------------------------------------------------------------------------------
def _text_pieces(path: Path, markdown: bool, progress: Progress) -> Iterator[tuple[str, dict]]:
    size = max(1, path.stat().st_size)
    heading, line_no = "", 0
    with open(path, encoding="utf-8", errors="replace", newline=None) as f:
        while True:
            line = f.readline(READ_SLICE)  # a slice of a long line, never the whole of it
            if not line:
                break
            line_no += line.endswith("\n")
            if markdown and (found := _MD_HEADING.match(line.strip())) and len(line) < 400:
                heading = clean(found.group(2))[:HEADING_MAX]
                yield "", {"heading": heading, "line": line_no}  # a new section starts here
                yield clean(found.group(2)), {"heading": heading, "line": line_no}
                continue
            text = clean(line)
            location = {"line": max(1, line_no)}
            if heading:
                location["heading"] = heading
            yield (text if text else "\n"), location
            if line_no % 2000 == 0:
                progress(min(1.0, f.buffer.tell() / size) if hasattr(f, "buffer") else 0.0)


class _HTML(html.parser.HTMLParser):
    BLOCK = {"p", "div", "li", "tr", "br", "section", "article", "blockquote", "pre", "table", "ul", "ol",
             "dd", "dt", "td", "th", "header", "footer", "main", "aside", "nav", "hr", "figure", "form"}
    HEADINGS = {"h1", "h2", "h3", "h4", "h5", "h6"}
    SKIP = {"script", "style", "template", "noscript", "svg", "head", "title"}

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.out: list[tuple[str, dict]] = []
        self.heading = ""
        self.skip = 0
        self.in_heading = False
        self.buffer: list[str] = []
        self.buffered = 0

    def _flush(self) -> None:
        text = clean("".join(self.buffer))
        self.buffer, self.buffered = [], 0
        if self.in_heading:
            if text:
                self.heading = text[:HEADING_MAX]
                self.out.append(("", {"heading": self.heading}))
                self.out.append((text, {"heading": self.heading}))
            return
        location = {"heading": self.heading} if self.heading else {}
        self.out.append((text or "\n", location))

    def handle_starttag(self, tag, attrs):
        if tag in self.SKIP:
            self.skip += 1
        elif tag in self.HEADINGS:
            self._flush()
            self.in_heading = True
        elif tag in self.BLOCK:
            self._flush()

    def handle_startendtag(self, tag, attrs):
        if tag in self.BLOCK:
            self._flush()

    def handle_endtag(self, tag):
        if tag in self.SKIP:
            self.skip = max(0, self.skip - 1)
        elif tag in self.HEADINGS and self.in_heading:
            self._flush()
            self.in_heading = False
        elif tag in self.BLOCK:
            self._flush()

    def handle_data(self, data):
        if self.skip:
            return
        self.buffer.append(data)
        self.buffered += len(data)
        if self.buffered > PASSAGE_MAX * 4:  # text without any tag: keep the buffer bounded
            self._flush()


def _html_pieces(path: Path, progress: Progress) -> Iterator[tuple[str, dict]]:
    size = max(1, path.stat().st_size)
    parser, done = _HTML(), 0
    with open(path, "rb") as f:
        decoder = io.TextIOWrapper(f, encoding="utf-8", errors="replace")
        while chunk := decoder.read(READ_SLICE):
            parser.feed(chunk)
            done += len(chunk)
            yield from parser.out
            parser.out.clear()
            progress(min(1.0, done / size))
    parser.close()
    parser._flush()
    yield from parser.out


def _pdf_pieces(path: Path, progress: Progress) -> Iterator[tuple[str, dict]]:
    from pypdf import PdfReader  # noqa: PLC0415 - a heavy import only a PDF needs
    from pypdf.errors import PdfReadError  # noqa: PLC0415

    try:
        with open(path, "rb") as f:
            reader = PdfReader(f)
            if reader.is_encrypted:
                raise ExtractError("the PDF is encrypted; save an unprotected copy and upload that")
            count = len(reader.pages)
            for number in range(count):
                page = reader.pages[number]
                text = page.extract_text() or ""
                # Resolved objects of earlier pages are not needed again: keep memory per page.
                getattr(reader, "resolved_objects", {}).clear()
                for paragraph in re.split(r"\n\s*\n|\n(?=[A-Z0-9•\-])", text):
                    yield (clean(paragraph) or "\n"), {"page": number + 1}
                yield "", {"page": number + 1}
                progress((number + 1) / max(1, count))
    except ExtractError:
        raise
    except (PdfReadError, ValueError, KeyError, TypeError, OSError, RecursionError, AssertionError) as exc:
        raise ExtractError(f"not a readable PDF ({type(exc).__name__}: {str(exc)[:200]}); "
                           "open it in a PDF viewer and save it again, then upload the copy") from exc


W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"


class _Capped(io.RawIOBase):
    """A stream that refuses to give more than `limit` bytes (an inflated zip member)."""

    def __init__(self, raw, limit: int) -> None:
        self.raw, self.limit, self.read_bytes = raw, limit, 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        data = self.raw.read(len(buffer))
        self.read_bytes += len(data)
        if self.read_bytes > self.limit:
            raise ExtractError(f"the DOCX's text inflates to more than {self.limit // (1024 * 1024)} MB "
                               "(a zip bomb, or a document to split into smaller files)")
        buffer[:len(data)] = data
        return len(data)


def _docx_pieces(path: Path, progress: Progress) -> Iterator[tuple[str, dict]]:
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
        if info.file_size > DOCX_XML_MAX:
            raise ExtractError(f"the DOCX's text inflates to {info.file_size // (1024 * 1024)} MB, more than "
                               f"{DOCX_XML_MAX // (1024 * 1024)} MB (a zip bomb, or a document to split into smaller files)")
        total = max(1, info.file_size)
        heading = ""
        try:
            with archive.open(info) as member:
                stream = _Capped(member, DOCX_XML_MAX)
                events = etree.iterparse(io.BufferedReader(stream), events=("end",), tag=f"{W}p",
                                         resolve_entities=False, no_network=True, load_dtd=False, huge_tree=False)
                for count, (_, p) in enumerate(events):
                    style = p.find(f"{W}pPr/{W}pStyle")
                    name = (style.get(f"{W}val") or "") if style is not None else ""
                    text = clean("".join(
                        node.text or "" if node.tag == f"{W}t" else "\t" for node in p.iter(f"{W}t", f"{W}tab")
                    ))
                    if text and (name.lower().startswith("heading") or name.lower() == "title"):
                        heading = text[:HEADING_MAX]
                        yield "", {"heading": heading}
                    yield (text or "\n"), ({"heading": heading} if heading else {})
                    p.clear()
                    parent = p.getparent()
                    while parent is not None and p.getprevious() is not None:
                        del parent[0]  # finished paragraphs: memory stays one paragraph deep
                    if count % 500 == 0:
                        progress(min(1.0, stream.read_bytes / total))
        except etree.XMLSyntaxError as exc:
            raise ExtractError(f"the DOCX's text is broken XML ({str(exc)[:200]}); save it again from Word") from exc
        except (zipfile.BadZipFile, EOFError, OSError) as exc:
            raise ExtractError(f"the DOCX archive is damaged ({exc}); save it again from Word") from exc


def pieces(path: Path, kind: str, progress: Progress) -> Iterator[tuple[str, dict]]:
    if kind in ("text", "markdown"):
        return _text_pieces(path, kind == "markdown", progress)
    if kind == "html":
        return _html_pieces(path, progress)
    if kind == "pdf":
        return _pdf_pieces(path, progress)
    if kind == "docx":
        return _docx_pieces(path, progress)
    raise ExtractError(f"cannot read {kind} files; upload {SUPPORTED}")


# --- passages -------------------------------------------------------------------------------
@dataclass
class _Open:
    parts: list[str] = field(default_factory=list)
    size: int = 0
    location: dict | None = None


def passages(stream: Iterator[tuple[str, dict]]) -> Iterator[tuple[str, dict]]:
    """Join pieces into passages of about PASSAGE_CHARS; a new page or heading starts a new
    one, and each passage keeps the location of its first piece. "" marks a section start,
    "\\n" a paragraph break."""
    current = _Open()

    def flush() -> Iterator[tuple[str, dict]]:
        nonlocal current
        text = "\n".join(p for p in current.parts if p).strip()
        if text:
            yield text, current.location or {}
        current = _Open()

    for text, location in stream:
        changed = current.location is not None and (
            location.get("page") != current.location.get("page") or location.get("heading") != current.location.get("heading")
        )
        if text == "" or changed:
            yield from flush()
            if text == "":
                continue
        if text == "\n":
            continue
        if current.size >= PASSAGE_CHARS:  # long enough: end it where a piece ends
            yield from flush()
        while text:
            if current.location is None:
                current.location = {k: v for k, v in location.items() if v not in ("", None)}
            room = PASSAGE_MAX - current.size
            if len(text) <= room:
                current.parts.append(text)
                current.size += len(text) + 1
                break
            cut = text.rfind(" ", 0, room)
            cut = cut if cut > room // 2 else room
            current.parts.append(text[:cut])
            current.size += cut
            text = text[cut:].lstrip()
            yield from flush()
    yield from flush()
