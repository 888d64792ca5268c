"""Documents as jobs (issue 51): an upload is queued, parsed in a child process under memory,
CPU and wall-clock limits, written in slices, and the bombs that took the web server to
gigabytes are read in bounded memory or fail saying which limit to raise. The jobs run on the
engine's own worker loop (jobs_app.worker.drain, in this thread); the parser is a real child."""

from __future__ import annotations

import resource
import time

import pytest

from jobs_app import queue
from jobs_app.worker import drain
from knowledge_app import tasks
from knowledge_app.models import Document, Passage
from tests.knowledge_files import make_docx_empty_elements, make_docx_many_runs, make_pdf_bomb
from tests.test_knowledge import WAIT_S, indexed, results, upload

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("knowledge_state")]


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # peak of this process (the worker here)


class TestStatus:
    def test_an_upload_is_queued_with_its_place_in_line_then_indexed(self, owner_client, other_user, embed):
        from django.test import Client

        first = upload(owner_client, "a.txt", "The spare key is under the mat.").json()
        second = upload(owner_client, "b.txt", "The bike lock code is 4321.").json()
        mallory = Client()
        mallory.force_login(other_user)
        theirs = upload(mallory, "m.txt", "Mallory keeps her notes here.").json()
        assert [first["status"], second["status"], theirs["status"]] == ["queued"] * 3
        # Fair between accounts: the other account's first document goes before the owner's second.
        assert [first["queue_position"], theirs["queue_position"]] == [1, 2]
        assert owner_client.get(f"/knowledge/{second['id']}").json()["queue_position"] == 3
        listed = owner_client.get("/knowledge").json()
        assert listed["jobs"].startswith("no job worker is running") and "db_worker" in listed["jobs"]
        assert drain(WAIT_S)
        done = owner_client.get(f"/knowledge/{second['id']}").json()
        assert done["status"] == "ready" and "queue_position" not in done and done["progress"] == 100
        assert "jobs" not in owner_client.get("/knowledge").json()  # nothing waits

    def test_a_long_document_is_written_in_slices_each_a_job_of_its_own(self, owner_client, embed, settings):
        settings.JOBS_SLICE_S = 0  # a batch per slice
        text = "\n\n".join(f"Paragraph {i} is about topic {i}. " * 40 for i in range(200))
        doc = indexed(owner_client, "long.txt", text)
        assert doc["status"] == "ready" and doc["chunks"] == Passage.objects.count() > 128
        slices = queue.rows(tasks.index_document, document_id=doc["id"])
        assert slices.count() >= 3 and {r.status for r in slices} == {"SUCCESSFUL"}
        assert sorted(r.return_value for r in slices).count("ready") == 1
        assert list(Passage.objects.order_by("seq").values_list("seq", flat=True)) == list(range(doc["chunks"]))
        assert "topic 123" in results(owner_client, "topic 123")[0]["text"]


class TestBombs:
    def test_the_docx_bombs_are_read_in_bounded_memory(self, owner_client, embed, settings):
        """Issue 51's bombs, built small: 16 MB of empty elements (zipped: ~30 KB) and one
        paragraph of 600 000 runs (a tree of it alone is ~150 MB). Both are read by the child
        under a 128 MiB address space, which only a streaming parser fits in."""
        settings.KNOWLEDGE_PARSE_MEMORY_MB = 128
        before = rss_mb()
        empty = make_docx_empty_elements(16, "the treasure is under the oak")
        assert len(empty) < 100_000
        doc = indexed(owner_client, "empty.docx", empty)
        assert doc["status"] == "ready", doc["error"]
        assert "oak" in results(owner_client, "treasure oak")[0]["text"]
        runs = indexed(owner_client, "runs.docx", make_docx_many_runs(600_000))
        assert runs["status"] == "ready", runs["error"]
        assert runs["chunks"] >= 600_000 // 1600
        assert rss_mb() - before < 50  # this process (the worker's role here) never held the document

    def test_a_document_that_needs_more_memory_fails_saying_which_limit(self, owner_client, embed, settings):
        settings.KNOWLEDGE_PARSE_MEMORY_MB = 96  # Python with lxml and pypdf loaded takes ~60 of it
        bomb = make_pdf_bomb(4)  # ~15 KB of file; its page inflates to 4 MB of operators, many times that parsed
        before = rss_mb()
        doc = indexed(owner_client, "bomb.pdf", bomb)
        assert doc["status"] == "failed" and "KNOWLEDGE_PARSE_MEMORY_MB" in doc["error"] and "96 MiB" in doc["error"]
        assert "split" in doc["error"] and Passage.objects.count() == 0
        assert rss_mb() - before < 50
        assert not any(settings.KNOWLEDGE_DIR.rglob("*.passages*"))  # no spool left behind

    def test_cpu_time_and_wall_clock_limits(self, owner_client, embed, settings):
        settings.KNOWLEDGE_PARSE_MEMORY_MB = 4096
        settings.KNOWLEDGE_PARSE_CPU_S = 1
        cpu = indexed(owner_client, "slow.pdf", make_pdf_bomb(20))
        assert cpu["status"] == "failed" and "KNOWLEDGE_PARSE_CPU_S" in cpu["error"], cpu["error"]
        settings.KNOWLEDGE_PARSE_CPU_S = 300
        settings.KNOWLEDGE_PARSE_TIMEOUT_S = 0.5
        started = time.monotonic()
        wall = indexed(owner_client, "slow-again.pdf", make_pdf_bomb(21))
        assert wall["status"] == "failed" and "KNOWLEDGE_PARSE_TIMEOUT_S" in wall["error"], wall["error"]
        assert time.monotonic() - started < 10

    def test_an_unclosed_tag_and_a_file_of_newlines_are_read_in_linear_time(self, owner_client, embed):
        """html.parser took 12 s on 8 MB of an unclosed tag (quadratic), and a file of newlines
        was a step per line; both are a fraction of a second now."""
        started = time.monotonic()
        html = indexed(owner_client, "open.html", "<p>The garden gate is green.</p><div " + "a" * (8 * 1024 * 1024))
        assert html["status"] == "ready" and "gate" in results(owner_client, "garden gate")[0]["text"]
        lines = indexed(owner_client, "blank.txt", "\n" * (20 * 1024 * 1024) + "The cellar light is broken.\n")
        assert lines["status"] == "ready" and lines["chunks"] == 1
        assert results(owner_client, "cellar light")[0]["location"] == {"line": 20 * 1024 * 1024 + 1}
        assert time.monotonic() - started < 8


class TestCancelAndRepeat:
    def test_the_same_content_again_is_not_parsed_twice(self, owner_client, embed):
        first = upload(owner_client, "a.txt", "The boiler code is 1234.")
        again = upload(owner_client, "copy.txt", "The boiler code is 1234.")  # while the first still waits
        assert first.status_code == 201 and again.status_code == 200 and again.json()["id"] == first.json()["id"]
        assert drain(WAIT_S)
        assert queue.rows(tasks.index_document).count() == 1
        assert upload(owner_client, "third.txt", "The boiler code is 1234.").json()["status"] == "ready"
        assert queue.rows(tasks.index_document).count() == 1

    def test_deleting_a_queued_document_drops_its_job(self, owner_client, embed):
        doc = upload(owner_client, "a.txt", "The spare key is under the mat.").json()
        assert queue.pending(tasks.index_document, document_id=doc["id"])
        assert owner_client.delete(f"/knowledge/{doc['id']}").status_code == 200
        assert not queue.pending(tasks.index_document, document_id=doc["id"])
        assert drain(WAIT_S) and Document.objects.count() == 0 and Passage.objects.count() == 0

    def test_deleting_the_owner_removes_documents_passages_vectors_and_jobs(self, owner, owner_client, embed):
        from django.db import connection

        from knowledge_app import vectors
        from knowledge_app.models import VectorSpace

        indexed(owner_client, "kept.txt", "I drink a double espresso every morning.")
        waiting = upload(owner_client, "waiting.txt", "The attic key hangs behind the door.").json()
        space = VectorSpace.objects.get()
        owner.delete()
        assert Document.objects.count() == 0 and Passage.objects.count() == 0
        assert not queue.pending(tasks.index_document, document_id=waiting["id"])
        with connection.cursor() as cur:
            cur.execute(f"SELECT count(*) FROM {vectors.table(space, 'passage')}")
            assert cur.fetchone()[0] == 0
        assert drain(WAIT_S)
