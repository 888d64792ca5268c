"""The job engine's glue (jobs_app): fair order between accounts, what /health and /metrics say
about the queue, and the jobs of a dead worker taken back — retried, then failed with the
reason after JOBS_MAX_ATTEMPTS. Real worker processes: tests/test_jobs_live.py."""

from __future__ import annotations

import subprocess
import sys
from datetime import timedelta

import pytest
from django.utils import timezone
from django_tasks_db.models import DBTaskResult

from jobs_app import queue, recovery
from jobs_app.models import JobWorker
from jobs_app.worker import drain
from knowledge_app import tasks
from knowledge_app.models import Document
from tests.test_knowledge import WAIT_S, upload

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("knowledge_state")]


def dead_pid() -> int:
    """The pid of a process of this host that has exited (and been reaped)."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def running_as(job_id: str, lane_ids: list[str]) -> None:
    """The job as a worker that claimed it leaves it: RUNNING, claimed by these lanes in turn."""
    DBTaskResult.objects.filter(pk=job_id).update(status="RUNNING", worker_ids=lane_ids, started_at=timezone.now())


def worker_row(worker_id: str, *, pid: int, beat_ago_s: float = 0.0, host: str = recovery.HOST) -> None:
    JobWorker.objects.create(id=worker_id, host=host, pid=pid, beat_at=timezone.now() - timedelta(seconds=beat_ago_s))


class TestHealth:
    def test_jobs_waiting_without_a_worker_make_health_degraded_with_the_reason(self, owner_client, anon_client, llm):
        body = owner_client.get("/health").json()
        assert body["jobs"] == {"status": "ok", "queued": 0, "oldest_s": 0.0, "workers": 0}
        upload(owner_client, "a.txt", "The spare key is under the mat.")
        body = owner_client.get("/health").json()
        assert body["status"] == "degraded" and body["jobs"]["queued"] == 1 and body["jobs"]["workers"] == 0
        assert "no job worker is running" in body["jobs"]["status"] and "db_worker" in body["jobs"]["status"]
        assert anon_client.get("/health").json() == {"status": "degraded"}
        worker_row("walive", pid=subprocess.os.getpid())  # a worker of this host, alive, beating
        body = owner_client.get("/health").json()
        assert body["jobs"]["status"] == "ok" and body["jobs"]["workers"] == 1 and body["status"] == "ok"
        JobWorker.objects.filter(pk="walive").update(beat_at=timezone.now() - timedelta(minutes=5))
        assert owner_client.get("/health").json()["jobs"]["workers"] == 0  # silent: not counted
        assert drain(WAIT_S)
        assert owner_client.get("/health").json()["jobs"]["queued"] == 0

    def test_metrics_count_jobs_by_task_and_outcome_with_durations(self, owner_client, embed, settings):
        settings.METRICS_TOKEN = "scrape"
        upload(owner_client, "a.txt", "The spare key is under the mat.")
        upload(owner_client, "b.pdf", b"%PDF-1.4 broken")
        assert drain(WAIT_S)
        text = owner_client.get("/metrics", HTTP_AUTHORIZATION="Bearer scrape").content.decode()
        assert 'navi_jobs_total{outcome="ready",task="index_document"} 1.0' in text
        assert 'navi_jobs_total{outcome="failed",task="index_document"} 1.0' in text
        assert 'navi_job_duration_seconds_count{task="index_document"} 2.0' in text
        assert "navi_jobs_queued 0.0" in text and "navi_job_workers 0.0" in text


class TestFairness:
    def test_each_account_s_first_job_goes_before_anyone_s_second(self, owner, other_user):
        from django.contrib.auth import get_user_model

        third = get_user_model().objects.create_user("trent")
        jobs = {}
        for name, user in [("a1", owner), ("a2", owner), ("a3", owner), ("b1", other_user), ("c1", third), ("b2", other_user)]:
            jobs[name] = queue.enqueue(tasks.embed_fact, fact_id=0, owner_id=user.pk).id
        order = sorted(jobs, key=lambda name: queue.position(jobs[name]))
        assert order == ["a1", "b1", "c1", "a2", "b2", "a3"]
        assert [queue.position(jobs[n]) for n in order] == [1, 2, 3, 4, 5, 6]


class TestDeadWorkers:
    def test_a_job_of_a_killed_worker_is_taken_back_and_finished(self, owner_client, embed):
        doc = upload(owner_client, "a.txt", "The spare key is under the mat.").json()
        worker_row("wkilled", pid=dead_pid())  # its heartbeat is fresh, but its process is gone from this host
        running_as(Document.objects.get().job_id, ["wkilled-0"])
        worker_row("wbusy", pid=subprocess.os.getpid())
        other = queue.enqueue(tasks.embed_fact, fact_id=0, owner_id=1)
        running_as(other.id, ["wbusy-1"])  # a live worker's job is left alone
        assert recovery.take_back() == 1
        assert DBTaskResult.objects.get(pk=other.id).status == "RUNNING"
        DBTaskResult.objects.filter(pk=other.id).delete()
        assert drain(WAIT_S)
        assert owner_client.get(f"/knowledge/{doc['id']}").json()["status"] == "ready"

    def test_a_silent_worker_s_job_is_taken_back_once_its_heartbeat_is_stale(self, owner_client, embed, settings):
        upload(owner_client, "a.txt", "The spare key is under the mat.")
        job_id = Document.objects.get().job_id
        worker_row("wfar", pid=1, host="another-machine/boot", beat_ago_s=5)  # another host: only its beat counts
        running_as(job_id, ["wfar-0"])
        assert recovery.take_back() == 0
        JobWorker.objects.filter(pk="wfar").update(beat_at=timezone.now() - timedelta(seconds=settings.JOBS_WORKER_STALE_S + 1))
        assert recovery.take_back() == 1 and DBTaskResult.objects.get(pk=job_id).status == "READY"

    def test_a_job_whose_worker_dies_every_time_fails_the_document_with_the_reason(self, owner_client, embed, settings):
        doc = upload(owner_client, "a.txt", "The spare key is under the mat.").json()
        job_id = Document.objects.get().job_id
        worker_row("wgone", pid=dead_pid())
        running_as(job_id, [f"w{n}-0" for n in range(settings.JOBS_MAX_ATTEMPTS - 1)] + ["wgone-0"])
        assert recovery.take_back() == 1
        row = DBTaskResult.objects.get(pk=job_id)
        assert row.status == "FAILED" and "stopped while running it 3 times" in row.traceback
        found = owner_client.get(f"/knowledge/{doc['id']}").json()
        assert found["status"] == "failed" and "stopped the worker every time" in found["error"]
        assert "split it" in found["error"]
        assert tasks.sweep_documents() == 0  # failed is final: nothing queued again
        assert drain(WAIT_S) and owner_client.get(f"/knowledge/{doc['id']}").json()["status"] == "failed"

    def test_no_document_stays_indexing_without_a_live_job(self, owner_client, embed):
        doc = upload(owner_client, "a.txt", "The spare key is under the mat.").json()
        DBTaskResult.objects.all().delete()  # its job row lost (a restore mid-indexing, a crash between slices)
        Document.objects.update(status="indexing", updated_at=timezone.now() - timedelta(minutes=1))
        assert tasks.sweep_documents() == 1
        assert queue.is_live(Document.objects.get().job_id)
        assert drain(WAIT_S) and owner_client.get(f"/knowledge/{doc['id']}").json()["status"] == "ready"


class TestPeriodicJobs:
    def test_a_worker_s_start_queues_the_file_cleanup_once_and_a_job_does_it(self, settings):
        import os
        import uuid

        from jobs_app import schedule
        from sessions_app.tasks import clean_session_files

        stale = settings.SESSION_FILES_DIR / str(uuid.uuid4())
        stale.mkdir(parents=True)
        os.utime(stale, (0, 0))  # untouched since 1970: past any TTL
        schedule.reset()
        schedule.run_due()  # what a worker's main loop does at its start...
        schedule.run_due()  # ...and a moment later: nothing is due again yet
        assert queue.rows(clean_session_files).filter(status="READY").count() == 1
        assert stale.exists()  # the check only queues; the job deletes
        assert drain(WAIT_S) and not stale.exists()

    def test_knowledge_embed_queue_leaves_the_backfill_to_a_worker(self, owner, embed, settings):
        import io

        from django.core.management import call_command

        from knowledge_app import indexer
        from memory_app.services import upsert_fact

        settings.KNOWLEDGE_EMBED_FACTS = False  # saved without a vector: the backfill's to make
        upsert_fact(owner.pk, "preferences", "morning drink", "a double espresso")
        assert indexer.missing_counts() == (0, 1)
        out = io.StringIO()
        call_command("knowledge_embed", "--queue", stdout=out)
        assert "queued" in out.getvalue() and queue.pending(tasks.backfill_embeddings)
        assert indexer.missing_counts() == (0, 1)  # the command itself embedded nothing
        assert drain(WAIT_S) and indexer.missing_counts() == (0, 0)
