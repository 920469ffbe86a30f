"""Documents made in the tests (never read from outside the repository): a small PDF writer (the PDF 1.4 text
operators on the standard Helvetica font, one content stream a page, as the PDF reference describes them), DOCX
through python-docx, and an encrypted copy of a PDF through pypdf's writer."""

from __future__ import annotations

import io
import textwrap


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")


def make_pdf(pages: list[str], *, width: int = 95) -> bytes:
    """A PDF whose page ``i`` shows ``pages[i]`` (wrapped lines of Helvetica 10 pt; latin-1 text)."""
    objects: list[bytes] = []

    def add(body: bytes) -> int:
        objects.append(body)
        return len(objects)

    catalog = add(b"")  # filled in below
    pages_id = add(b"")
    font = add(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>")
    kids = []
    for text in pages:
        lines = []
        for paragraph in text.split("\n"):
            lines.extend(textwrap.wrap(paragraph, width) or [""])
        ops = ["BT", "/F1 10 Tf", "12 TL", "50 800 Td"]
        for line in lines[:64]:
            ops.append(f"({_escape(line)}) Tj T*")
        ops.append("ET")
        stream = "\n".join(ops).encode("latin-1", "replace")
        content = add(b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream")
        kids.append(add(b"<< /Type /Page /Parent %d 0 R /MediaBox [0 0 595 842] /Resources << /Font << /F1 %d 0 R >> "
                        b">> /Contents %d 0 R >>" % (pages_id, font, content)))
    objects[catalog - 1] = b"<< /Type /Catalog /Pages %d 0 R >>" % pages_id
    objects[pages_id - 1] = (b"<< /Type /Pages /Kids [" + b" ".join(b"%d 0 R" % k for k in kids)
                             + b"] /Count %d >>" % len(kids))
    out = io.BytesIO()
    out.write(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
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


def encrypt_pdf(data: bytes, password: str = "secret") -> bytes:
    """A copy of a PDF that opens only with ``password`` (RC4, which pypdf writes without extra packages)."""
    from pypdf import PdfReader, PdfWriter

    writer = PdfWriter()
    writer.append(PdfReader(io.BytesIO(data)))
    writer.encrypt(user_password=password, owner_password=password, algorithm="RC4-128")
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def make_docx(sections: list[tuple[str, str]]) -> bytes:
    """A DOCX of ``(heading, body)`` sections: each heading in the Heading 1 style, its body's paragraphs after."""
    from docx import Document

    doc = Document()
    for heading, body in sections:
        doc.add_heading(heading, level=1)
        for paragraph in body.split("\n\n"):
            doc.add_paragraph(paragraph)
    out = io.BytesIO()
    doc.save(out)
    return out.getvalue()
