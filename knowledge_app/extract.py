"""Documents to passages: each format read as a stream of (text, location) pieces, then joined
into passages of about PASSAGE_CHARS that keep where they came from.

Bounded memory whatever the file: text is read in blocks (a 100 MB line is never one string,
blank lines cost nothing), HTML and a DOCX's XML are parsed by lxml's event target without a
tree (libxml2 is linear on an unclosed tag; a million empty elements or runs cost time only), a
DOCX's inflated size is capped (a zip bomb stops at the cap), a PDF is read a page at a time.
This module needs no Django: it runs in the parser child (`parse_child`), under its limits.
"""

from __future__ import annotations

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
BLOCK = 1024 * 1024  # text read this much at a time; only lines with something on them cost a step
_FILLED_LINE = re.compile(r"[^\n]*\S[^\n]*")


def _text_pieces(path: Path, markdown: bool, progress: Progress) -> Iterator[tuple[str, dict]]:
    """Lines with text, each with its line number. Blank lines are skipped in C (a file of 190 MB
    of newlines is one regex scan), a line longer than READ_SLICE comes in slices of it."""
    size = max(1, path.stat().st_size)
    heading, line_no, carry = "", 0, ""  # line_no: lines before `complete`
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
                for piece in (line[i:i + READ_SLICE] for i in range(0, len(line), READ_SLICE)):
                    if markdown and len(line) < 400 and (match := _MD_HEADING.match(line.strip())):
                        heading = clean(match.group(2))[:HEADING_MAX]
                        yield "", {"heading": heading, "line": number + 1}  # a new section starts here
                        yield clean(match.group(2)), {"heading": heading, "line": number + 1}
                        break
                    text = clean(piece)
                    if text:
                        yield text, ({"line": number + 1, "heading": heading} if heading else {"line": number + 1})
            line_no += complete.count("\n")
            while len(carry) > READ_SLICE:  # a line without an end in sight: its slices now, the rest later
                if text := clean(carry[:READ_SLICE]):
                    yield text, ({"line": line_no + 1, "heading": heading} if heading else {"line": line_no + 1})
                carry = carry[READ_SLICE:]
            progress(min(1.0, f.buffer.tell() / size))
            if not block:
                return


class _HTMLTarget:
    """lxml's HTML parser (libxml2: linear, where html.parser is quadratic on an unclosed tag)
    calls these as it reads; no tree is built. Text is collected per block element."""

    BLOCK = {"p", "div", "li", "tr", "br", "section", "article", "blockquote", "pre", "table", "ul", "ol",
             "dd", "dt", "td", "th", "header", "footer", "main", "aside", "nav", "hr", "figure", "form", "body"}
    HEADINGS = {"h1", "h2", "h3", "h4", "h5", "h6"}
    SKIP = {"script", "style", "template", "noscript", "svg", "head", "title"}

    def __init__(self) -> None:
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
        if text:
            self.out.append((text, {"heading": self.heading} if self.heading else {}))

    def start(self, tag, attrib) -> None:
        tag = tag.lower() if isinstance(tag, str) else ""
        if tag in self.SKIP:
            self.skip += 1
        elif tag in self.HEADINGS:
            self._flush()
            self.in_heading = True
        elif tag in self.BLOCK:
            self._flush()

    def end(self, tag) -> None:
        tag = tag.lower() if isinstance(tag, str) else ""
        if tag in self.SKIP:
            self.skip = max(0, self.skip - 1)
        elif tag in self.HEADINGS and self.in_heading:
            self._flush()
            self.in_heading = False
        elif tag in self.BLOCK:
            self._flush()

    def data(self, data: str) -> None:
        if self.skip:
            return
        self.buffer.append(data)
        self.buffered += len(data)
        if self.buffered > PASSAGE_MAX * 4:  # text without any tag: keep the buffer bounded
            self._flush()

    def comment(self, text) -> None:
        pass

    def close(self) -> None:
        self._flush()


def _html_pieces(path: Path, progress: Progress) -> Iterator[tuple[str, dict]]:
    from lxml import etree  # noqa: PLC0415 - the parser child imports it only for HTML and DOCX

    size = max(1, path.stat().st_size)
    target = _HTMLTarget()
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


def _pdf_pieces(path: Path, progress: Progress) -> Iterator[tuple[str, dict]]:
    from pypdf import PdfReader  # noqa: PLC0415 - a heavy import only a PDF needs
    from pypdf.errors import PdfReadError, PyPdfError  # noqa: PLC0415

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
    except (PdfReadError, PyPdfError, ValueError, KeyError, TypeError, OSError, RecursionError, AssertionError) as exc:
        raise ExtractError(f"not a readable PDF ({type(exc).__name__}: {str(exc)[:200]}); "
                           "open it in a PDF viewer and save it again, then upload the copy") from exc


W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"


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


class _DocxTarget:
    """lxml's XML parser calls these as it reads word/document.xml; no tree is built, so a
    million empty elements or a paragraph of a million runs cost time, not memory. Text is
    collected per paragraph (a nested one, in a text box, is a paragraph of its own), and a
    paragraph longer than PASSAGE_MAX * 4 is handed on in pieces."""

    def __init__(self) -> None:
        self.out: list[tuple[str, dict]] = []
        self.heading = ""
        self.depth = 0  # paragraphs open (text boxes nest them)
        self.style = ""
        self.in_text = False
        self.buffer: list[str] = []
        self.buffered = 0

    def _location(self) -> dict:
        return {"heading": self.heading} if self.heading else {}

    def _flush(self, paragraph_end: bool) -> None:
        text = clean("".join(self.buffer))
        self.buffer, self.buffered = [], 0
        name = self.style.lower()
        if paragraph_end and text and (name.startswith("heading") or name == "title") and len(text) <= PASSAGE_MAX:
            self.heading = text[:HEADING_MAX]
            self.out.append(("", {"heading": self.heading}))
        if text:
            self.out.append((text, self._location()))

    def start(self, tag, attrib) -> None:
        if tag == P:
            if self.depth:
                self._flush(False)
            self.depth += 1
            self.style = ""
        elif tag == T:
            self.in_text = True
        elif tag == TAB and self.depth:
            self.buffer.append("\t")
        elif tag == STYLE and self.depth:
            self.style = attrib.get(VAL) or ""

    def end(self, tag) -> None:
        if tag == T:
            self.in_text = False
        elif tag == P and self.depth:
            self._flush(True)
            self.depth -= 1
            self.style = ""

    def data(self, data: str) -> None:
        if self.in_text and self.depth:
            self.buffer.append(data)
            self.buffered += len(data)
            if self.buffered > PASSAGE_MAX * 4:
                self._flush(False)

    def close(self) -> None:
        if self.buffer:
            self._flush(False)


P, T, TAB, STYLE, VAL = f"{W}p", f"{W}t", f"{W}tab", f"{W}pStyle", f"{W}val"


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
        target = _DocxTarget()
        parser = etree.XMLParser(target=target, resolve_entities=False, no_network=True, load_dtd=False,
                                 huge_tree=False)
        try:
            with archive.open(info) as member:
                stream = _Capped(member, DOCX_XML_MAX)
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
