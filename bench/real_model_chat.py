"""One simple question to a real OpenAI-compatible server (llama.cpp), through Navi's WebSocket
and directly with the very request Navi sent, back to back: how much time Navi adds.

    python bench/real_model_chat.py --openai http://127.0.0.1:8093/v1 [--model M] [--rounds 3]

A capturing proxy between Navi and the server records Navi's request body; the direct call
replays that body, so both sides make the server read the same prompt. Between the two a tiny
unrelated request evicts the server's prompt cache, so the direct call is as cold as Navi's;
"direct again" replays once more at once: the same prompt from the cache. Needs a running server.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import websockets

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.live_server import LiveNavi  # noqa: E402

QUESTION = "What is the capital of France? Answer in one short sentence."


def capturing_proxy(upstream: str) -> tuple[ThreadingHTTPServer, list[dict]]:
    """Forwards every request to `upstream` (streaming the answer back) and keeps chat bodies."""
    bodies: list[dict] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def _forward(self, method: str) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0)) if method == "POST" else None
            if raw and self.path.endswith("/chat/completions"):
                bodies.append(json.loads(raw))
            with httpx.stream(method, upstream.rstrip("/") + self.path.removeprefix("/v1"), content=raw,
                              headers={"Content-Type": "application/json"}, timeout=600) as response:
                self.send_response(response.status_code)
                self.send_header("Content-Type", response.headers.get("content-type", "application/json"))
                self.end_headers()
                for chunk in response.iter_raw():
                    self.wfile.write(chunk)
                    self.wfile.flush()

        def do_GET(self):
            self._forward("GET")

        def do_POST(self):
            self._forward("POST")

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, bodies


async def through_navi(navi: LiveNavi, session_id: str) -> tuple[float, float]:
    async with websockets.connect(navi.ws_url(session_id), additional_headers=navi.headers, max_size=None) as ws:
        start = time.monotonic()
        first = None
        await ws.send(json.dumps({"type": "message", "content": QUESTION}))
        while True:
            frame = json.loads(await asyncio.wait_for(ws.recv(), 900))
            if frame["type"] == "stream_delta" and first is None:
                first = time.monotonic() - start
            if frame["type"] in ("stream_end", "error", "stream_stopped") and "run_id" in frame:
                if frame["type"] != "stream_end":
                    raise SystemExit(f"the run ended with {frame}")
                return first or 0.0, time.monotonic() - start


def evict(upstream: str, model: str) -> None:
    """One tiny unrelated request, so that the direct call reads its prompt cold as Navi's did
    (llama.cpp keeps the last prompt; replaying Navi's body right after it would be served from
    that cache and look ~100x faster than it is)."""
    body = {"model": model, "messages": [{"role": "user", "content": "Say OK."}], "max_tokens": 1}
    httpx.post(upstream.rstrip("/") + "/chat/completions", json=body, timeout=900)


def direct(upstream: str, body: dict) -> tuple[float, float]:
    start, first = time.monotonic(), None
    with httpx.stream("POST", upstream.rstrip("/") + "/chat/completions", json=body, timeout=900) as response:
        for line in response.iter_lines():
            if first is None and '"content":"' in line.replace(" ", "") and '"content":""' not in line.replace(" ", ""):
                first = time.monotonic() - start
    return first or 0.0, time.monotonic() - start


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--openai", required=True, help="the server's /v1 URL")
    ap.add_argument("--model", default="")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    proxy, bodies = capturing_proxy(args.openai)
    proxy_url = f"http://127.0.0.1:{proxy.server_address[1]}/v1"
    env = {"OPENAI_BASE_URL": proxy_url, "OPENAI_MODEL": args.model or "default", "CHAT_TITLES": "first_words",
           "MEMORY_EXTRACTION_IDLE_S": "3600"}
    rows = []
    with LiveNavi(env=env) as navi:
        navi._manage("shell", "-c", "from agent.models import Profile; Profile.objects.update(llm_backend='openai')")
        for _ in range(args.rounds):
            with navi.api() as client:
                session = client.post("/sessions", json={"new": True}).json()["session_id"]
            seen = len(bodies)
            navi_first, navi_total = await through_navi(navi, session)
            answer_body = bodies[-1] if len(bodies) > seen else None
            if answer_body is None:
                raise SystemExit("Navi made no chat call through the proxy")
            evict(args.openai, answer_body["model"])  # the server's prompt cache now holds Navi's prompt
            direct_first, direct_total = direct(args.openai, answer_body)
            warm_first, _ = direct(args.openai, answer_body)
            rows.append((navi_first, navi_total, direct_first, direct_total, len(bodies) - seen, warm_first))
    proxy.shutdown()
    print(f"{'round':>5} {'navi first':>11} {'navi total':>11} {'direct first':>13} {'direct total':>13} "
          f"{'calls':>6} {'direct again, first':>20}")
    for i, (nf, nt, df, dt, calls, wf) in enumerate(rows, 1):
        print(f"{i:>5} {nf:>10.2f}s {nt:>10.2f}s {df:>12.2f}s {dt:>12.2f}s {calls:>6} {wf:>19.2f}s")
    print(f"median total: navi {statistics.median(r[1] for r in rows):.2f} s, "
          f"direct {statistics.median(r[3] for r in rows):.2f} s (same request body)")


if __name__ == "__main__":
    asyncio.run(main())
