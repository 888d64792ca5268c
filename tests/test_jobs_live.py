"""Job workers as `make run` has them (issue 51): a real server (`python -m navi_project.serve`)
with its `manage.py db_worker` child, two accounts, the test LLM serving embeddings slowly.

Another account's note is ready while a big document indexes; a delete stops the job within
2 s, leaving no passage or vector; a worker killed with -9 is started again and its job resumes
from its last batch; two workers on one database share the queue (SQLite here, PostgreSQL in
`make test-postgres`); the web server's memory does not grow with the bombs; Ctrl-C stops both.
"""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.knowledge_files import make_docx_empty_elements, make_docx_many_runs, make_pdf_bomb
from tests.live_server import ROOT, LiveNavi
from tests.llm_server import LLMServer

pytestmark = pytest.mark.live
FAST = {"JOBS_POLL_S": "0.1", "JOBS_HEARTBEAT_S": "0.5", "JOBS_SLICE_S": "0.3", "LOG_LEVEL": "WARNING"}


def wait_for(condition, what: str, timeout: float = 30, poll: float = 0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = condition()
        if found:
            return found
        time.sleep(poll)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def big_text(tag: str, paragraphs: int) -> str:
    """`paragraphs` passages of ~1 100 characters, every one different (each gets a vector)."""
    return "\n\n".join(f"{tag} paragraph {i}: " + " ".join(f"{tag}{i}w{j}" for j in range(120)) for i in range(paragraphs))


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


class Account:
    def __init__(self, navi: LiveNavi, token: str) -> None:
        self.client = httpx.Client(base_url=navi.url, headers={"Authorization": f"Bearer {token}"}, timeout=60)

    def upload(self, name: str, data: bytes | str) -> dict:
        payload = data.encode() if isinstance(data, str) else data
        response = self.client.post("/knowledge", files={"file": (name, io.BytesIO(payload))})
        assert response.status_code in (200, 201), response.text
        return response.json()

    def get(self, doc_id: str) -> dict:
        return self.client.get(f"/knowledge/{doc_id}").json()

    def ready(self, doc_id: str, timeout: float = 60) -> dict:
        return wait_for(lambda: (d := self.get(doc_id))["status"] in ("ready", "failed") and d, f"{doc_id} indexed",
                        timeout=timeout)


def jobs_of(navi: LiveNavi, document_id: str) -> list[dict]:
    rows = navi.sql("SELECT status, worker_ids, args_kwargs FROM django_tasks_database_dbtaskresult "
                    "WHERE task_path = %s", ("knowledge_app.tasks.index_document",))
    out = []
    for status, worker_ids, args in rows:
        args = json.loads(args) if isinstance(args, str) else args
        if args["kwargs"]["document_id"] == document_id:
            out.append({"status": status, "worker_ids": json.loads(worker_ids) if isinstance(worker_ids, str) else worker_ids})
    return out


def vector_rows(navi: LiveNavi) -> int:
    """Passage vectors in every space (SQLite: counted in vec0's own rowid table)."""
    tables = [t for (t,) in navi.sql("SELECT 'knowledge_vec_' || id || '_passage' FROM knowledge_app_vectorspace")]
    if navi.env["DATABASE_URL"].startswith("sqlite"):
        tables = [f"{t}_rowids" for t in tables]
    return sum(navi.sql(f"SELECT count(*) FROM {t}")[0][0] for t in tables)


def doc_key(navi: LiveNavi, document_id: str) -> str:
    """A document's id as its database stores it (SQLite: the UUID's hex)."""
    return document_id.replace("-", "") if navi.env["DATABASE_URL"].startswith("sqlite") else document_id


def passages_of(navi: LiveNavi, document_id: str) -> int:
    return navi.sql("SELECT count(*) FROM knowledge_app_passage WHERE document_id = %s", (doc_key(navi, document_id),))[0][0]


def expected_passages(text: str) -> int:
    """How many passages the parser makes of `text` (knowledge_app.extract needs no Django)."""
    import tempfile

    from knowledge_app import extract

    with tempfile.NamedTemporaryFile("w", suffix=".txt") as f:
        f.write(text)
        f.flush()
        return sum(1 for _ in extract.passages(extract.pieces(Path(f.name), "text", lambda fraction: None)))


def parse_children() -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if b"knowledge_app.parse_child" in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


@pytest.fixture(scope="module")
def llm():
    with LLMServer() as server:
        yield server


@pytest.fixture(scope="module")
def navi(llm):
    with LiveNavi(env={"OLLAMA_HOST": llm.url, "NAVI_JOB_WORKERS": "1", **FAST}) as server:
        server.mallory_token = server.add_user("mallory")
        yield server


@pytest.fixture
def accounts(navi, llm):
    llm.reset()
    llm.embed_delay = 0.0
    owner, mallory = Account(navi, navi.token), Account(navi, navi.mallory_token)
    yield owner, mallory
    llm.embed_delay = 0.0
    for account in (owner, mallory):  # nothing left indexing for the next test
        for doc in account.client.get("/knowledge").json()["documents"]:
            account.client.delete(f"/knowledge/{doc['id']}")
        account.client.close()


def test_make_run_starts_one_worker_beside_the_server_and_health_counts_it(navi, accounts):
    assert len(navi.job_worker_pids()) == 1
    jobs = wait_for(lambda: (j := accounts[0].client.get("/health").json()["jobs"])["workers"] == 1 and j, "a live worker")
    assert jobs["status"] == "ok" and jobs["queued"] == 0


def test_another_account_s_note_is_ready_while_a_big_document_indexes(navi, llm, accounts):
    owner, mallory = accounts
    llm.embed_delay = 0.15  # a slow embedding model: ~0.3 s a batch of 64 passages
    text = big_text("fair", 600)
    big = owner.upload("big.txt", text)
    wait_for(lambda: owner.get(big["id"])["status"] == "indexing", "the big document indexing")
    started = time.monotonic()
    note = mallory.upload("note.txt", "Mallory's bike is locked with the code 4711.")
    assert mallory.ready(note["id"])["status"] == "ready"
    waited = time.monotonic() - started
    print(f"\nanother account's one-line note: ready {waited:.2f} s after its upload")
    assert waited < 10
    assert owner.get(big["id"])["status"] == "indexing"  # the big one was still going
    assert owner.ready(big["id"], timeout=120)["chunks"] == expected_passages(text)


def test_deleting_a_document_mid_indexing_stops_its_job_within_2_s_and_leaves_nothing(navi, llm, accounts):
    owner, _ = accounts
    llm.embed_delay = 0.15
    vectors_before = vector_rows(navi)
    big = owner.upload("doomed.txt", big_text("doomed", 600))
    wait_for(lambda: owner.get(big["id"])["progress"] >= 50, "indexing half way", timeout=60)
    assert passages_of(navi, big["id"]) > 0
    started = time.monotonic()
    assert owner.client.delete(f"/knowledge/{big['id']}").status_code == 200
    wait_for(lambda: not any(j["status"] in ("READY", "RUNNING") for j in jobs_of(navi, big["id"])),
             "its job to stop", timeout=5, poll=0.02)
    stopped = time.monotonic() - started
    print(f"\ndelete mid-indexing: the job stopped {stopped:.2f} s later")
    assert stopped < 2
    assert passages_of(navi, big["id"]) == 0 and vector_rows(navi) == vectors_before
    llm.embed_delay = 0.0
    started = time.monotonic()
    after = owner.upload("after.txt", "The next document is not kept waiting.")
    assert owner.ready(after["id"], timeout=10)["status"] == "ready"
    print(f"the next document: ready {time.monotonic() - started:.2f} s after its upload")


def test_deleting_a_document_while_it_is_parsed_kills_the_parser_within_2_s(navi, accounts):
    owner, _ = accounts
    slow = owner.upload("slow.pdf", make_pdf_bomb(40))  # its one page takes pypdf many seconds
    wait_for(parse_children, "the parser child running", timeout=30)
    started = time.monotonic()
    assert owner.client.delete(f"/knowledge/{slow['id']}").status_code == 200
    wait_for(lambda: not parse_children(), "the parser child gone", timeout=5, poll=0.02)
    assert time.monotonic() - started < 2


def test_a_killed_worker_is_started_again_and_its_job_resumes_within_5_s(navi, llm, accounts):
    owner, _ = accounts
    llm.embed_delay = 0.15
    text = big_text("survivor", 400)
    big = owner.upload("survivor.txt", text)
    wait_for(lambda: owner.get(big["id"])["progress"] >= 50, "indexing half way", timeout=60)
    (victim,) = navi.job_worker_pids()
    os.kill(victim, signal.SIGKILL)
    at_kill = owner.get(big["id"])
    killed = time.monotonic()
    (new_pid,) = wait_for(lambda: [p for p in navi.job_worker_pids() if p != victim], "the worker started again", timeout=20)
    spawned = time.monotonic()
    wait_for(lambda: navi.sql("SELECT 1 FROM jobs_app_jobworker WHERE pid = %s", (new_pid,)), "its first heartbeat")
    started = time.monotonic()
    wait_for(lambda: owner.get(big["id"])["progress"] > at_kill["progress"] or owner.get(big["id"])["status"] == "ready",
             "indexing going on", timeout=15)
    resumed = time.monotonic()
    print(f"\nkill -9 at {at_kill['progress']} %: restarted {spawned - killed:.2f} s later, Python and Django up "
          f"{started - spawned:.2f} s after that, the job resumed {resumed - started:.2f} s after the worker's start")
    assert resumed - started < 5
    done = owner.ready(big["id"], timeout=60)
    assert done["status"] == "ready" and done["chunks"] == expected_passages(text)
    total, seqs, texts = navi.sql("SELECT count(*), count(DISTINCT seq), count(DISTINCT text) FROM knowledge_app_passage "
                                  "WHERE document_id = %s", (doc_key(navi, big["id"]),))[0]
    assert total == seqs == texts == done["chunks"]  # every passage once: none written twice across the kill
    assert "exited with code -9" in navi.log() and "starting job worker 1 again" in navi.log()


def test_the_web_server_s_memory_does_not_grow_with_the_bombs(navi, accounts):
    owner, _ = accounts
    web = navi.proc.pid
    before = rss_mb(web)
    bombs = {"empty.docx": make_docx_empty_elements(16), "runs.docx": make_docx_many_runs(600_000),
             "open.html": b"<p>The gate is green.</p><div " + b"a" * (8 * 1024 * 1024)}
    for name, data in bombs.items():
        doc = owner.upload(name, data)
        assert owner.ready(doc["id"], timeout=120)["status"] == "ready", name
    after = rss_mb(web)
    (worker,) = navi.job_worker_pids()
    print(f"\nweb server RSS: {before:.0f} MB before the bombs, {after:.0f} MB after; worker {rss_mb(worker):.0f} MB")
    assert after - before < 50


def test_two_workers_take_jobs_from_one_queue(navi, llm, accounts):
    """A second worker as on another machine: its own process, the same DATABASE_URL
    (PostgreSQL under make test-postgres), one queue with the server's own worker; every
    document indexed once."""
    owner, mallory = accounts
    llm.embed_delay = 0.1
    other = subprocess.Popen([sys.executable, "manage.py", "db_worker", "--lanes", "1"], cwd=ROOT, env=navi.env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: owner.client.get("/health").json()["jobs"]["workers"] == 2, "two live workers")
        texts = {f"doc{i}.txt": big_text(f"share{i}", 25) for i in range(8)}
        docs = [(account, account.upload(name, text), text)
                for n, (name, text) in enumerate(texts.items()) for account in [(owner, mallory)[n % 2]]]
        for account, doc, text in docs:
            done = account.ready(doc["id"], timeout=120)
            assert done["status"] == "ready" and done["chunks"] == expected_passages(text) == passages_of(navi, doc["id"])
        processes = {lane.rpartition("-")[0] for _, doc, _ in docs for job in jobs_of(navi, doc["id"])
                     for lane in job["worker_ids"]}
        assert len(processes) == 2  # both workers took jobs
    finally:
        other.send_signal(signal.SIGTERM)
        assert other.wait(timeout=30) == 0  # a clean stop


def test_ctrl_c_stops_the_server_and_its_worker(navi):
    worker = navi.job_worker_pids()
    os.killpg(navi.proc.pid, signal.SIGINT)  # the terminal's Ctrl-C: the whole foreground group
    assert navi.proc.wait(timeout=30) == 0
    wait_for(lambda: not any(Path(f"/proc/{p}").exists() and b"db_worker" in Path(f"/proc/{p}/cmdline").read_bytes()
                             for p in worker), "the worker gone", timeout=10)
    navi.proc = None
