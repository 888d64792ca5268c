"""Benchmark: what the documents of issue 51 cost the web server, the job worker and the other
account now that heavy work is a job (bench/README "Jobs: documents off the web server").

    .venv/bin/python bench/jobs_memory.py [--big-mb 190] [--html-mb 16] [--runs 3000000,3700000]

Prints figures, asserts nothing. One real Navi server as `make run` starts it (`python -m
navi_project.serve` with one `manage.py db_worker` child, KNOWLEDGE_PARSE_* at their defaults),
the test LLM server as the embedding server (instant: what is measured is Navi). Account A
uploads the three DOCX bombs and the 16 MB unclosed-tag HTML, one after the other; for each:
the web server's RSS before / peak / after, the worker's RSS after (against its idle RSS), the
parser child's peak RSS and the time to `ready` or `failed`. Then account B uploads a 190 MB
text (newlines, as in the issue) and, while it indexes, account A's one-line note: its wait.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.http_flood import RssSampler, rss_bytes  # noqa: E402
from tests.knowledge_files import make_docx_empty_elements, make_docx_many_runs  # noqa: E402
from tests.live_server import LiveNavi  # noqa: E402
from tests.llm_server import LLMServer  # noqa: E402

MB = 1024 * 1024


def mb(n: float) -> str:
    return f"{n / MB:.0f} MB"


class ChildPeak(threading.Thread):
    """The peak RSS of any parser child (`knowledge_app.parse_child`) while it runs."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.peak, self._done = 0, threading.Event()

    def run(self) -> None:
        while not self._done.wait(0.02):
            for entry in Path("/proc").iterdir():
                if entry.name.isdigit():
                    try:
                        if b"knowledge_app.parse_child" in (entry / "cmdline").read_bytes():
                            self.peak = max(self.peak, rss_bytes(int(entry.name)))
                    except OSError:
                        continue

    def stop(self) -> int:
        self._done.set()
        self.join()
        return self.peak


def upload(client: httpx.Client, name: str, content, size: int) -> dict:
    boundary = "navi-bench-boundary"
    head = (f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="{name}"\r\n'
            "Content-Type: application/octet-stream\r\n\r\n").encode()
    tail = f"\r\n--{boundary}--\r\n".encode()

    def body():
        yield head
        yield from content
        yield tail

    response = client.post("/knowledge", content=body(), headers={
        "Content-Type": f"multipart/form-data; boundary={boundary}", "Content-Length": str(len(head) + size + len(tail))})
    response.raise_for_status()
    return response.json()


def wait_done(client: httpx.Client, doc_id: str, timeout: float = 1800) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        doc = client.get(f"/knowledge/{doc_id}").json()
        if doc["status"] in ("ready", "failed"):
            return doc
        time.sleep(0.1)
    raise SystemExit(f"{doc_id} not indexed within {timeout} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--big-mb", type=int, default=190)
    parser.add_argument("--html-mb", type=int, default=16)
    parser.add_argument("--runs", default="3000000,3700000", help="runs of the two one-paragraph DOCX bombs")
    parser.add_argument("--prose-mb", type=int, default=30, help="then B's text of prose this big (0: skip)")
    args = parser.parse_args()
    with LLMServer() as llm, LiveNavi(env={"OLLAMA_HOST": llm.url, "NAVI_JOB_WORKERS": "1",
                                          "KNOWLEDGE_MAX_FILE_MB": str(max(200, args.big_mb + 5))}) as navi:
        a = httpx.Client(base_url=navi.url, headers=navi.headers, timeout=600)
        b = httpx.Client(base_url=navi.url, headers={"Authorization": f"Bearer {navi.add_user('bob')}"}, timeout=600)
        deadline = time.monotonic() + 30
        while not navi.job_worker_pids() and time.monotonic() < deadline:
            time.sleep(0.1)
        (worker,) = navi.job_worker_pids()
        a.post("/knowledge", files={"file": ("warm.txt", b"A first small note warms both processes up.")})
        time.sleep(3)
        web, web_idle, worker_idle = navi.proc.pid, rss_bytes(navi.proc.pid), rss_bytes(worker)
        print(f"idle: web server {mb(web_idle)}, job worker {mb(worker_idle)}")
        runs = [int(r) for r in args.runs.split(",")]
        bombs = [
            ("64 MB of empty elements.docx", make_docx_empty_elements(64)),
            (f"one paragraph, {runs[0]:,} runs.docx", make_docx_many_runs(runs[0])),
            (f"one paragraph, {runs[1]:,} runs.docx", make_docx_many_runs(runs[1])),
            (f"{args.html_mb} MB unclosed tag.html",
             b"<p>The gate is green.</p><div " + b"a" * (args.html_mb * MB)),
        ]
        print("| document | file | result | time | web RSS before / peak / after | worker RSS after | parser peak |")
        print("|---|---|---|---|---|---|---|")
        for name, data in bombs:
            before = rss_bytes(web)
            sampler, child = RssSampler(web), ChildPeak()
            sampler.start()
            child.start()
            started = time.monotonic()
            doc = upload(a, name, [data], len(data))
            done = wait_done(a, doc["id"])
            seconds = time.monotonic() - started
            peak, parser_peak = sampler.stop(), child.stop()
            result = "ready" if done["status"] == "ready" else f"failed: {done['error'][:60]}"
            print(f"| {name} | {len(data) // 1024} KB | {result} ({done['chunks']} passages) | {seconds:.1f} s | "
                  f"{mb(before)} / {mb(peak)} / {mb(rss_bytes(web))} | {mb(rss_bytes(worker))} | {mb(parser_peak)} |")

        # B's big text, and A's one-line note while it indexes.
        last = b"The last line of the big text says where the ladder is.\n"
        piece = b"\n" * MB
        sampler = RssSampler(web)
        sampler.start()
        started = time.monotonic()
        big = upload(b, f"{args.big_mb} MB of newlines.txt", [*(piece for _ in range(args.big_mb)), last],
                     args.big_mb * MB + len(last))
        uploaded = time.monotonic() - started
        note_started = time.monotonic()
        line = b"The spare key is under the blue flowerpot."
        note = upload(a, "note.txt", [line], len(line))
        note_done = wait_done(a, note["id"])
        note_wait = time.monotonic() - note_started
        big_state = b.get(f"/knowledge/{big['id']}").json()
        big_done = wait_done(b, big["id"])
        total = time.monotonic() - started
        print(f"B's {args.big_mb} MB text: uploaded in {uploaded:.1f} s, {big_done['status']} "
              f"({big_done['chunks']} passages, {big_done['error'] or ''}) {total:.1f} s after the upload began; "
              f"web RSS peak {mb(sampler.stop())}")
        print(f"A's one-line note during it: {note_done['status']} {note_wait:.2f} s after its upload "
              f"(B's document was {big_state['status']} {big_state['progress']} % then)")
        if args.prose_mb:
            prose(a, b, web, args.prose_mb)
        print(f"after everything: web server {mb(rss_bytes(web))} (idle {mb(web_idle)}), "
              f"job worker {mb(rss_bytes(worker))} (idle {mb(worker_idle)})")


def prose(a: httpx.Client, b: httpx.Client, web: int, size_mb: int) -> None:
    """B's text of real paragraphs (every one a passage: a long parse, then many slices of
    writing) and A's one-line note while it indexes."""
    paragraph = lambda i: (f"Paragraph {i} of the long report describes item {i} in plain words. " * 14 + "\n\n").encode()  # noqa: E731
    count = size_mb * MB // len(paragraph(10_000))
    size = sum(len(paragraph(i)) for i in range(count))
    sampler = RssSampler(web)
    sampler.start()
    started = time.monotonic()
    big = upload(b, f"{size_mb} MB of prose.txt", (paragraph(i) for i in range(count)), size)
    waits = []
    while (state := b.get(f"/knowledge/{big['id']}").json())["status"] in ("queued", "indexing"):
        line = f"Note {len(waits)}: the spare key is under flowerpot number {len(waits)}.".encode()
        note_started = time.monotonic()
        note = upload(a, f"note{len(waits)}.txt", [line], len(line))
        wait_done(a, note["id"])
        waits.append((time.monotonic() - note_started, state["status"], state["progress"]))
        time.sleep(2)
    done = wait_done(b, big["id"])
    print(f"B's {size_mb} MB of prose ({count} paragraphs): {done['status']}, {done['chunks']} passages, "
          f"{time.monotonic() - started:.1f} s; web RSS peak {mb(sampler.stop())}")
    print("A's one-line notes meanwhile: " + ", ".join(f"{w:.2f} s (B {s} {p} %)" for w, s, p in waits))


if __name__ == "__main__":
    main()
