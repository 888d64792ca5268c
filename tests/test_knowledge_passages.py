"""Passages that answer (issue #54): every format cut along its sections, headings leading the
text under them, whole sentences repeated across a long section's passages, no tiny passage,
markup cleaned, `location.section` filled, and the citation the knowledge_search tool gives.
Hostile input (a huge adornment, `.. include::` of a file, a table of 10 000 cells) stays within
limits and reads nothing but the upload."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from asgiref.sync import async_to_sync

from knowledge_app import chunker, extract
from tests.knowledge_files import W, _zip, make_pdf


def cut(tmp_path: Path, name: str, data: bytes | str, kind: str | None = None) -> list[tuple[str, dict]]:
    """The passages the parser child would make of this file."""
    path = tmp_path / name
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    return list(extract.passages(extract.pieces(path, kind or extract.kind_of(name), lambda fraction: None)))


def containing(found: list[tuple[str, dict]], words: str) -> tuple[str, dict]:
    hits = [(text, location) for text, location in found if words in text]
    assert hits, f"no passage holds {words!r}"
    return hits[0]


def no_tiny(found: list[tuple[str, dict]]) -> None:
    assert all(len(text) >= chunker.MIN_CHARS for text, _ in found), [t for t, _ in found if len(t) < chunker.MIN_CHARS]


def docx(body: str) -> bytes:
    document = f'<?xml version="1.0" encoding="UTF-8"?><w:document xmlns:w="{W}"><w:body>{body}</w:body></w:document>'
    return _zip({"word/document.xml": document.encode(), "[Content_Types].xml": b"<Types/>"})


def para(text: str, style: str = "") -> str:
    props = f'<w:pPr><w:pStyle w:val="{style}"/></w:pPr>' if style else ""
    return f"<w:p>{props}<w:r><w:t>{text}</w:t></w:r></w:p>"


def table(rows: list[list[str]]) -> str:
    cells = "".join("<w:tr>" + "".join(f"<w:tc>{para(c)}</w:tc>" for c in row) + "</w:tr>" for row in rows)
    return f"<w:tbl>{cells}</w:tbl>"


SENTENCES = [f"Sentence number {i} says that the value of setting {i} is {i * 7} units." for i in range(60)]
RST = """\
.. _models-ref:

======
Models
======

.. toctree::
   :maxdepth: 1

   hidden/page

A model is the single source of information about your data. See :class:`~django.db.models.Model`
and :ref:`the field options <field-options>` or :doc:`/topics/db/queries`, with ``objects`` as the
manager. Read `the tutorial <https://example.com/tutorial>`_ for **more** on *models*.

.. |project| replace:: Substituted Project Name

Field options
=============

..
   A comment the reader never sees: secret-comment-words.

null
----

.. attribute:: Field.null

    If ``True``, Django stores empty values as ``NULL`` in the database. Default is ``False``.

.. note::

    Avoid using null on string-based fields such as ``CharField`` and ``TextField``.

.. versionadded:: 5.0

    Database-computed default values were added.

An example::

    class Person(models.Model):
        name = models.CharField(max_length=30, null=True)

blank
-----

If ``True``, the field is allowed to be blank in forms; this is validation, not storage at all.

.. code-block:: python
    :caption: models.py

    blank_example = models.TextField(blank=True)
"""


class TestFormats:
    def test_markdown_headings_sections_and_fenced_code(self, tmp_path):
        text = ("Guide\n=====\n\nThe guide explains how the garden is looked after through the year.\n\n"
                "## Watering\n\nWater the tomatoes every morning in summer, at the roots and never on the leaves.\n\n"
                "```python\ndef water(plant):\n\n    return plant.roots\n```\n\n"
                "### Tools\n\nThe hose hangs in the shed, next to the [watering can](https://example.com/can) and the **rake**.\n")
        found = cut(tmp_path, "guide.md", text)
        no_tiny(found)
        body, location = containing(found, "tomatoes")
        assert body.startswith("Watering\n") and location["section"] == "Guide › Watering" and location["line"] == 6
        assert "def water(plant):\n\n    return plant.roots" in body  # the code block whole, its lines kept
        tools, where = containing(found, "hose")
        assert where["section"] == "Guide › Watering › Tools" and where["heading"] == "Tools"
        assert "next to the watering can and the rake." in tools and "](" not in tools and "**" not in tools

    def test_rst_headings_by_adornment_directives_and_inline_markup(self, tmp_path):
        found = cut(tmp_path, "models.rst", RST)
        no_tiny(found)
        everything = "\n".join(text for text, _ in found)
        intro, location = containing(found, "single source of information")
        assert intro.startswith("Models\n") and location == {"line": 4, "heading": "Models", "section": "Models"}
        assert "See Model and the field options or /topics/db/queries, with objects as the manager." in intro
        assert "Read the tutorial for more on models." in intro
        null, where = containing(found, "stores empty values")
        assert where["section"] == "Models › Field options › null"
        assert "Field.null\nIf True, Django stores empty values as NULL in the database." in null
        assert "Note: Avoid using null on string-based fields such as CharField and TextField." in null
        assert "New in 5.0: Database-computed default values were added." in null
        assert "An example:\nclass Person(models.Model):\n    name = models.CharField" in null
        blank, where = containing(found, "allowed to be blank")
        assert where["section"] == "Models › Field options › blank"
        assert "blank_example = models.TextField(blank=True)" in blank and ":caption:" not in blank
        for gone in ("toctree", "hidden/page", "models-ref", "secret-comment-words", "Substituted Project", ":class:",
                     "``", ".. ", "maxdepth"):
            assert gone not in everything, gone

    def test_rst_written_in_a_txt_file_is_read_as_rst_and_plain_text_is_not(self, tmp_path):
        found = cut(tmp_path, "fields.txt", RST)  # Django's docs: .txt files in reST
        assert containing(found, "stores empty values")[1]["section"] == "Models › Field options › null"
        plain = cut(tmp_path, "notes.txt", "Shopping list for the weekend trip to the lake house.\n\n"
                    "Remember: milk, bread, the blue tent, and the spare key under the mat.\n")
        assert [location for _, location in plain] == [{"line": 1}]  # paragraphs, no sections invented

    def test_html_sections_without_page_chrome(self, tmp_path):
        page = ("<html><head><title>T</title><style>.x{}</style><script>var hidden = 'leak';</script></head><body>"
                "<header>Site banner words</header><nav><a href='/'>Home navigation link</a></nav>"
                "<div class='sphinxsidebar' role='navigation'>Table of contents sidebar</div>"
                "<h1>Garden<a class='headerlink' href='#g'>¶</a></h1><p>The garden is watered by hand every evening in July and August.</p>"
                "<h2>Tomatoes ¶</h2><p>Tomatoes need a stake, a sunny wall and water at the roots each morning.</p>"
                "<pre>stake = Stake(height=180)\n    tie(tomato, stake)</pre>"
                "<footer>Copyright footer words</footer></body></html>")
        found = cut(tmp_path, "garden.html", page)
        no_tiny(found)
        everything = "\n".join(text for text, _ in found)
        for gone in ("leak", "banner", "navigation link", "sidebar", "footer", "¶"):
            assert gone not in everything, gone
        tomatoes, location = containing(found, "sunny wall")
        assert tomatoes.startswith("Tomatoes\n") and location == {"heading": "Tomatoes", "section": "Garden › Tomatoes"}
        assert "stake = Stake(height=180)\n    tie(tomato, stake)" in tomatoes  # <pre> whole

    def test_docx_tables_as_rows_and_empty_headings_merged(self, tmp_path):
        body = (para("Household", "Title") + para("Insurance", "Heading1") + para("Policies", "Heading2")
                + table([["Policy", "Insurer", "Renewal"], ["Home", "Acme Mutual", "March"], ["Car", "Roadsafe", "October"]])
                + para("Contacts", "Heading1") + para("Call the broker, Dana Whitfield, before any renewal is signed."))
        found = cut(tmp_path, "house.docx", docx(body))
        no_tiny(found)
        rows, location = containing(found, "Acme Mutual")
        assert location["section"] == "Household › Insurance › Policies"
        assert "Policy: Home; Insurer: Acme Mutual; Renewal: March\nPolicy: Car; Insurer: Roadsafe; Renewal: October" in rows
        assert rows.startswith("Household\nInsurance\nPolicies\n")  # headings with nothing under them lead what follows
        assert all(text.strip() not in ("Household", "Insurance", "Policies", "Contacts") for text, _ in found)
        assert containing(found, "Dana Whitfield")[1]["section"] == "Household › Contacts"

    def test_pdf_passages_keep_their_page(self, tmp_path):
        pages = ["Cover", "The warranty lasts 24 months from the day of delivery to the buyer.\n" * 3,
                 "Returns are accepted within 30 days when the box is unopened and complete."]
        found = cut(tmp_path, "manual.pdf", make_pdf(pages))
        assert containing(found, "warranty")[1] == {"page": 2}
        assert containing(found, "Returns")[1] == {"page": 3}
        assert all("warranty" not in text or "Returns" not in text for text, _ in found)  # never two pages in one

    def test_a_long_section_overlaps_by_whole_sentences(self, tmp_path):
        text = "# Settings\n\n" + " ".join(SENTENCES) + "\n"
        found = cut(tmp_path, "settings.md", text)
        assert len(found) >= 4
        for sentence in SENTENCES:  # an answer near a boundary is whole in a passage
            assert any(sentence in passage for passage, _ in found), sentence
        for (before, _), (after, _) in zip(found, found[1:]):
            assert after.startswith("Settings\n")
            last = before.rsplit(". ", 1)[-1]
            assert last in after, "the next passage repeats the last sentence"
            assert len(before) <= chunker.PASSAGE_CHARS + len("Settings\n") + chunker.OVERLAP
        sizes = [len(passage) for passage, _ in found]
        assert max(sizes) <= chunker.PASSAGE_MAX and min(sizes) >= chunker.MIN_CHARS

    def test_text_without_sentence_ends_fills_its_passages(self, tmp_path):
        paragraphs = ["\n".join(f"2026-12-0{p} 10:{i:02d} worker{p} took job {i} from the queue" for i in range(25))
                      for p in range(1, 9)]
        found = cut(tmp_path, "worker.log", "\n\n".join(paragraphs))
        sizes = [len(text) for text, _ in found]
        assert all(chunker.PIECE_MIN <= size <= chunker.PASSAGE_CHARS for size in sizes[:-1]), sizes
        assert [w for text, _ in found for w in text.split()] == "\n".join(paragraphs).split()  # every word, in order

    def test_small_sections_join_a_neighbour_under_the_same_parent(self, tmp_path):
        text = ("# Kitchen\n\nThe kitchen was redone in 2019 with an induction hob and a long oak counter.\n\n"
                "## Oven\n\nBake at 180.\n\n## Fridge\n\nThe fridge filter is changed every six months, "
                "the model number is under the crisper drawer.\n")
        found = cut(tmp_path, "kitchen.md", text)
        no_tiny(found)
        oven, location = containing(found, "Bake at 180.")
        assert "fridge filter" in oven and location["section"] == "Kitchen"  # siblings joined: cited by what they share
        assert cut(tmp_path, "tiny.md", "# Hi\n\nShort.") == [("Hi\nShort.", {"line": 1, "heading": "Hi", "section": "Hi"})]


class TestHostileInput:
    def test_an_include_never_reads_the_file_it_names(self, tmp_path):
        secret = tmp_path / "secret.txt"
        secret.write_text("TOP-SECRET-MARKER")
        text = (f"Title\n=====\n\nBefore the include, a sentence that stays in the passage.\n\n.. include:: {secret}\n\n"
                f".. literalinclude:: {secret}\n\n.. raw:: html\n   :file: {secret}\n\n"
                f".. csv-table:: Data\n   :file: {secret}\n\n.. include:: /etc/passwd\n\nAfter them, more words.\n")
        found = cut(tmp_path, "doc.rst", text)
        everything = "\n".join(t for t, _ in found)
        assert "TOP-SECRET-MARKER" not in everything and "root:" not in everything
        assert str(secret) not in everything and "/etc/passwd" not in everything
        assert "Before the include" in everything and "After them, more words." in everything

    def test_bad_and_huge_adornments_stay_bounded(self, tmp_path):
        text = ("Title\n" + "=" * 1_000_000 + "\n\nSome text under a title with a huge underline, long enough.\n\n"
                "Short\n==\n\nA title whose underline is too short is still read as a heading here.\n\n"
                "~~~~~~~\nMismatched\n-------\n\nA paragraph after an overline that does not match its underline.\n\n"
                + "-" * 200_000 + "\n\n" + "^" * 70_000 + "x\n\nThe end of the document.\n")
        found = cut(tmp_path, "bad.rst", text)
        assert all(len(t) <= chunker.PASSAGE_MAX + chunker.OVERLAP + 2 * 200 for t, _ in found)
        everything = "\n".join(t for t, _ in found)
        assert "huge underline" in everything and "underline is too short" in everything and "The end" in everything
        assert all(len(location.get("section", "")) <= 12 * 203 for _, location in found)

    def test_a_table_of_ten_thousand_cells_stays_within_limits(self, tmp_path):
        rows = [[f"col{c}" for c in range(100)]] + [[f"r{r}c{c}" for c in range(100)] for r in range(99)]
        wide = [[f"w{c}" for c in range(10_000)]]
        found = cut(tmp_path, "big.docx", docx(para("Data", "Heading1") + table(rows) + table(wide)))
        assert all(len(t) <= chunker.PASSAGE_MAX + chunker.OVERLAP + 100 for t, _ in found)
        everything = "\n".join(t for t, _ in found)
        assert "col0: r0c0; col1: r0c1" in everything and "col99: r98c99" in everything and "w9999" in everything
        assert len(found) < 1000 and all(location["section"] == "Data" for _, location in found)


class TestEmbeddingText:
    def test_the_vector_is_made_from_the_title_and_section_path(self):
        location = {"line": 3, "section": "Tutorial › Blog Blueprint"}
        assert chunker.embedding_text("flask-docs.rst", location, "The text.") == (
            "flask docs › Tutorial › Blog Blueprint\n\nThe text.")
        assert chunker.embedding_text("models.txt", {"section": "Models › null"}, "T") == "Models › null\n\nT"
        assert chunker.embedding_text("report.pdf", {"page": 2}, "T") == "report\n\nT"


# --- through the app ---------------------------------------------------------------------------
@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("knowledge_state")
class TestIndexed:
    def test_the_tool_cites_the_section_and_the_page(self, owner, owner_client, embed):
        from knowledge_app.tools import KnowledgeSearchTool
        from tests.test_knowledge import indexed
        from tools_app.context import current_user_id

        assert indexed(owner_client, "models.txt", RST)["status"] == "ready"
        pdf = make_pdf(["Cover", "The warranty lasts 24 months from the day of delivery to the buyer."])
        assert indexed(owner_client, "report.pdf", pdf)["status"] == "ready"
        token = current_user_id.set(owner.pk)
        try:
            answer = async_to_sync(KnowledgeSearchTool().execute)({"query": "empty values NULL database"})
            warranty = async_to_sync(KnowledgeSearchTool().execute)({"query": "warranty months"})
        finally:
            current_user_id.reset(token)
        # "Field options" has no text of its own: its heading leads the passage of its first subsection.
        assert re.search(r"\[1\] models\.txt › Models › Field options › null \(line \d+\):\nField options\nnull\n",
                         answer.output)
        source = answer.metadata["sources"][0]
        assert source["location"]["section"] == "Models › Field options › null" and source["query"] == "empty values NULL database"
        assert "[1] report.pdf, page 2:\n" in warranty.output

    def test_words_and_meaning_find_a_passage_by_its_section_path(self, owner, owner_client, embed):
        from knowledge_app import search
        from tests.test_knowledge import indexed

        start = "Press the start button and wait until the small green light stops blinking, then close the door."
        for name, machine in (("kitchen.md", "Dishwasher"), ("laundry.md", "Washing machine")):
            text = (f"# {machine}\n\nThe {machine.lower()} came with the house; the manual is in the drawer by the door.\n\n"
                    f"## Starting\n\n{start}\n")
            assert indexed(owner_client, name, text)["status"] == "ready"
        by_words = [h for h in search.search(owner.pk, "washing", 10, mode="words") if start in h.text]
        assert [h.name for h in by_words] == ["laundry.md"]  # "washing" is only in its section path
        by_meaning = [h for h in search.search(owner.pk, "washing machine start button", 10, mode="vectors") if start in h.text]
        assert by_meaning[0].name == "laundry.md"
        assert by_meaning[0].location["section"] == "Washing machine › Starting"

    def test_documents_split_by_the_old_splitter_are_split_again_by_a_job(self, owner, owner_client, embed):
        from jobs_app.worker import drain
        from knowledge_app import indexer, tasks
        from knowledge_app.models import Document, Passage
        from tests.test_knowledge import indexed

        kept = indexed(owner_client, "models.rst", RST)
        gone = indexed(owner_client, "old.txt", "An old note whose upload is no longer kept, about the attic key.")
        broken = indexed(owner_client, "broken.md", "# Broken\n\nThis one's upload is replaced by bytes the parser refuses.")
        # As before this change: one passage without a section, cut by splitter 0.
        Document.objects.update(splitter=0)
        Passage.objects.filter(document_id=kept["id"]).update(section="", location={"line": 1})
        indexer.file_path(Document.objects.get(pk=gone["id"])).unlink()
        refused = Document.objects.get(pk=broken["id"])
        Document.objects.filter(pk=refused.pk).update(kind="pdf")
        indexer.file_path(refused).write_bytes(b"%PDF-1.4 not really")
        before_broken = list(Passage.objects.filter(document=refused).values_list("text", flat=True))
        assert tasks.queue_resplits() == 2  # the one without its upload cannot be split again
        assert drain(60)
        doc = Document.objects.get(pk=kept["id"])
        assert doc.status == "ready" and doc.splitter == extract.SPLITTER_VERSION
        sections = set(Passage.objects.filter(document=doc).values_list("section", flat=True))
        assert "Models › Field options › null" in sections
        assert Document.objects.get(pk=gone["id"]).splitter == 0 and Passage.objects.filter(document_id=gone["id"]).exists()
        refused.refresh_from_db()  # a new parse that fails keeps what was there
        assert refused.status == "ready" and refused.splitter == extract.SPLITTER_VERSION
        assert list(Passage.objects.filter(document=refused).values_list("text", flat=True)) == before_broken
        assert tasks.queue_resplits() == 0

    def test_a_binary_file_named_rst_is_refused_and_nothing_is_saved(self, owner_client):
        from knowledge_app.models import Document
        from tests.test_knowledge import upload

        response = upload(owner_client, "page.rst", b"Title\n=====\n\x00\x01\x02\xff binary")
        assert response.status_code == 400 and "is not text" in response.json()["error"]
        assert not Document.objects.exists()
