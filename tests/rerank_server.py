"""A protocol-level test reranker: `POST /v1/rerank` as llama.cpp's `llama-server --reranking` and
vLLM serve it (`{"model", "query", "documents", "top_n"}` → `{"model", "usage", "results": [{"index",
"relevance_score"}]}`, results best first), and Hugging Face TEI's `POST /rerank` (`{"query",
"texts"}` → `[{"index", "score"}]`).

The "model" is scripted: a document containing a key of `scores` gets that score (the first key
found), any other `default`. `answer` replaces the whole reply (a broken server); `gate` holds
every reply until set (a slow model); `tei_only` serves only TEI's route (404 on /v1/rerank).
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class RerankServer:
    def __init__(self) -> None:
        self.scores: dict[str, float] = {}
        self.default = 0.01
        self.answer: tuple[int, Any] | None = None  # (HTTP status, body: JSON-able or raw bytes)
        self.gate: threading.Event | None = None
        self.tei_only = False
        self.api_key: str | None = None
        self.requests: list[dict] = []  # (path, body) of each request, in order
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> RerankServer:
        handler = type("Handler", (_Handler,), {"fake": self})
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self.gate is not None:
            self.gate.set()  # let held replies go: their clients gave up long ago
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def seen(self) -> list[dict]:
        with self._lock:
            return list(self.requests)

    def score(self, text: str) -> float:
        return next((s for key, s in self.scores.items() if key in text), self.default)


class _Handler(BaseHTTPRequestHandler):
    fake: RerankServer
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: Any) -> None:
        pass

    def _send(self, status: int, body: Any) -> None:
        payload = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        try:
            self.wfile.write(payload)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client timed out and left

    def do_POST(self) -> None:
        fake = self.fake
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        try:
            body = json.loads(raw)
        except ValueError:
            return self._send(400, {"error": "the body is not JSON"})
        with fake._lock:
            fake.requests.append({"path": self.path, "body": body, "auth": self.headers.get("Authorization")})
        if fake.api_key is not None and self.headers.get("Authorization") != f"Bearer {fake.api_key}":
            return self._send(401, {"error": "invalid api key"})
        if fake.gate is not None:
            fake.gate.wait(timeout=60)
        cohere = self.path == "/v1/rerank" and not fake.tei_only
        if not cohere and self.path != "/rerank":
            return self._send(404, {"error": f"no route {self.path}"})
        if fake.answer is not None:
            return self._send(*fake.answer)
        documents = body.get("documents") if cohere else body.get("texts")
        if not isinstance(body.get("query"), str) or not isinstance(documents, list) or not documents:
            return self._send(422, {"error": "query (a string) and a non-empty list of documents are required"})
        ranked = sorted(((i, fake.score(d)) for i, d in enumerate(documents)), key=lambda p: -p[1])
        if cohere:
            top = body.get("top_n") or len(ranked)
            results = [{"index": i, "relevance_score": s} for i, s in ranked[:top]]
            return self._send(200, {"model": body.get("model"), "usage": {"prompt_tokens": 1, "total_tokens": 1},
                                    "results": results})
        self._send(200, [{"index": i, "score": s} for i, s in ranked])
