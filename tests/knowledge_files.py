"""Documents made for the knowledge tests: PDFs with a real text layer, DOCX archives, and the
hostile ones (zip bombs, issue 51's DOCX bombs of empty elements and of runs, a PDF whose page
inflates, a broken PDF), written byte by byte so no fixture file is needed."""

from __future__ import annotations

import io
import zipfile


def _pdf_string(text: str) -> str:
    return "(" + text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)") + ")"


def make_pdf(pages: list[str], *, padding: int = 0) -> bytes:
    """A PDF whose page i shows pages[i] (one line per text line). `padding` bytes of an
    unused stream object per page make a big file whose text stays small."""
    objects: list[bytes] = []

    def add(body: bytes) -> int:
        objects.append(body)
        return len(objects)

    catalog = add(b"")  # filled in below
    pages_obj = add(b"")
    font = add(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    kids = []
    for text in pages:
        lines = " ".join(f"{_pdf_string(line)} Tj 0 -14 Td" for line in text.split("\n"))
        stream = f"BT /F1 12 Tf 50 750 Td {lines} ET".encode("latin-1")
        content = add(b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream")
        extra = b""
        if padding:
            junk = add(b"<< /Length %d >>\nstream\n" % padding + b"\x00" * padding + b"\nendstream")
            extra = b" /PieceInfo << /Junk %d 0 R >>" % junk
        kids.append(add(b"<< /Type /Page /Parent %d 0 R /MediaBox [0 0 612 792] /Contents %d 0 R "
                        b"/Resources << /Font << /F1 %d 0 R >> >>%s >>" % (pages_obj, content, font, extra)))
    objects[catalog - 1] = b"<< /Type /Catalog /Pages %d 0 R >>" % pages_obj
    objects[pages_obj - 1] = b"<< /Type /Pages /Kids [%s] /Count %d >>" % (
        b" ".join(b"%d 0 R" % k for k in kids), len(kids))
    out = io.BytesIO()
    out.write(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(out.tell())
        out.write(b"%d 0 obj\n" % number + body + b"\nendobj\n")
    xref = out.tell()
    out.write(b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1))
    for offset in offsets:
        out.write(b"%010d 00000 n \n" % offset)
    out.write(b"trailer\n<< /Size %d /Root %d 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, catalog, xref))
    return out.getvalue()


W = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"


def make_docx(paragraphs: list[tuple[str, str]]) -> bytes:
    """A DOCX of (style, text) paragraphs: style "Heading1" makes a heading, "" plain text."""
    body = []
    for style, text in paragraphs:
        props = f'<w:pPr><w:pStyle w:val="{style}"/></w:pPr>' if style else ""
        body.append(f"<w:p>{props}<w:r><w:t>{text}</w:t></w:r></w:p>")
    document = f'<?xml version="1.0" encoding="UTF-8"?><w:document xmlns:w="{W}"><w:body>{"".join(body)}</w:body></w:document>'
    return _zip({"word/document.xml": document.encode(), "[Content_Types].xml": b"<Types/>"})


def make_docx_bomb(inflated_mb: int = 400) -> bytes:
    """A DOCX whose document.xml inflates to `inflated_mb` MB of one paragraph's text."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        with archive.open("word/document.xml", "w", force_zip64=True) as member:
            member.write(f'<w:document xmlns:w="{W}"><w:body><w:p><w:r><w:t>'.encode())
            block = b"A" * (1024 * 1024)
            for _ in range(inflated_mb):
                member.write(block)
            member.write(b"</w:t></w:r></w:p></w:body></w:document>")
    return out.getvalue()


def _zip(members: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return out.getvalue()


def _docx_streamed(parts) -> bytes:
    """A DOCX whose document.xml is written from `parts` (bytes, repeated blocks stay small zipped)."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        with archive.open("word/document.xml", "w", force_zip64=True) as member:
            for part in parts:
                member.write(part)
        archive.writestr("[Content_Types].xml", b"<Types/>")
    return out.getvalue()


def make_docx_empty_elements(inflated_mb: int, last_words: str = "the last words") -> bytes:
    """The first bomb of issue 51: document.xml of `inflated_mb` MB of empty elements (a tree of
    them took a server from 214 MB to 2.26 GB), then one real paragraph."""
    block = b"<w:x/>" * (1024 * 1024 // 6)
    return _docx_streamed([f'<w:document xmlns:w="{W}"><w:body>'.encode(), *([block] * inflated_mb),
                           f"<w:p><w:r><w:t>{last_words}</w:t></w:r></w:p></w:body></w:document>".encode()])


def make_docx_many_runs(runs: int, text: str = "x") -> bytes:
    """The second and third bombs: one paragraph of `runs` runs (3.4 GB, then 8.68 GB, as a tree)."""
    block_runs = 10_000
    block = f"<w:r><w:t>{text}</w:t></w:r>".encode() * block_runs
    return _docx_streamed([f'<w:document xmlns:w="{W}"><w:body><w:p>'.encode(), *([block] * (runs // block_runs)),
                           b"</w:p></w:body></w:document>"])


def make_pdf_bomb(inflated_mb: int) -> bytes:
    """A page whose content stream (FlateDecode) inflates to `inflated_mb` MB of text operators: a
    few KB of file that needs far more memory to read than it is big."""
    import zlib

    packer = zlib.compressobj(9)
    chunk = b"BT /F1 12 Tf 50 750 Td (x) Tj ET\n" * 30_000
    packed, made = [], 0
    while made < inflated_mb * 1024 * 1024:
        packed.append(packer.compress(chunk))
        made += len(chunk)
    stream = b"".join(packed) + packer.flush()
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>", b"<< /Type /Pages /Kids [4 0 R] /Count 1 >>",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 5 0 R /Resources << /Font << /F1 3 0 R >> >> >>",
        b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(stream) + stream + b"\nendstream",
    ]
    out = io.BytesIO()
    out.write(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(out.tell())
        out.write(b"%d 0 obj\n" % number + body + b"\nendobj\n")
    xref = out.tell()
    out.write(b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1))
    for offset in offsets:
        out.write(b"%010d 00000 n \n" % offset)
    out.write(b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref))
    return out.getvalue()
