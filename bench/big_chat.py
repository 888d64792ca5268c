"""Benchmark: importing a chat of 100 000 messages (~4.8 MB of JSON) and reading it back
(issue #26 item 7: import took 30-43 s, `GET /sessions/<id>` 20-31 s and 25 MB).

    .venv/bin/python bench/big_chat.py

Prints figures, asserts nothing. One real Navi server (`python -m navi_project.serve`); the
export is generated here, posted to `POST /sessions/import`, then the chat is read: the
newest page (`GET /sessions/<id>`), one older page (`?before=`), and every page back to the
first. Server RSS is sampled throughout.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.http_flood import RssSampler, rss_bytes  # noqa: E402
from tests.live_server import LiveNavi  # noqa: E402

MB = 1024 * 1024
MESSAGES = 100_000


def export(count: int) -> bytes:
    messages = [
        {"seq": i + 1, "role": "user" if i % 2 == 0 else "assistant", "content": f"message number {i + 1}"}
        for i in range(count)
    ]
    data = {"format": "navi.session", "version": 1, "session": {"title": "a long chat"}, "messages": messages}
    return json.dumps(data).encode()


def timed(navi: LiveNavi, label: str, call):
    baseline = rss_bytes(navi.proc.pid)
    sampler = RssSampler(navi.proc.pid, every=0.01)
    sampler.start()
    start = time.monotonic()
    response = call()
    seconds = time.monotonic() - start
    peak = sampler.stop()
    print(f"{label}: {response.status_code}, {seconds:.2f} s, {len(response.content) / MB:.2f} MB answer, "
          f"server RSS +{(peak - baseline) / MB:.1f} MB at peak")
    return response


def main() -> None:
    body = export(MESSAGES)
    print(f"export: {MESSAGES} messages, {len(body) / MB:.1f} MB")
    with LiveNavi() as navi, navi.api() as client:
        client.timeout = httpx.Timeout(300)
        client.get("/health")
        created = timed(navi, "import", lambda: client.post("/sessions/import", content=body,
                                                             headers={"Content-Type": "application/json"}))
        sid = created.json()["session_id"]
        first = timed(navi, "GET /sessions/<id> (newest page)", lambda: client.get(f"/sessions/{sid}"))
        page = first.json()
        print(f"    {len(page['messages'])} messages, has_more={page.get('has_more')}")
        if page.get("has_more"):
            older = page["messages"][0]["id"]
            timed(navi, "GET ?before=<id> (one older page)", lambda: client.get(f"/sessions/{sid}?before={older}"))
            start, pages, before = time.monotonic(), 0, older
            while before is not None:
                chunk = client.get(f"/sessions/{sid}", params={"before": before, "limit": 1000}).json()
                pages += 1
                before = chunk["messages"][0]["id"] if chunk["has_more"] else None
            print(f"all pages back to the first (limit=1000): {pages} pages, {time.monotonic() - start:.1f} s")


if __name__ == "__main__":
    main()
