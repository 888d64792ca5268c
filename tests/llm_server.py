"""Protocol-level fake LLM server (Ollama + OpenAI-compatible) for tests and benchmarks.

A real HTTP/1.1 server on 127.0.0.1 so the production code paths (the official
``ollama`` client, httpx SSE parsing, timeouts, disconnects) run unmodified.
Replies are scripted with :class:`Turn` / :class:`Rule`; see the README-style
docstrings on :class:`LLMServer`. Run ``python -m tests.llm_server --help`` for the CLI.

Like Ollama, it enforces a JSON schema sent in ``format`` (/api/chat) or ``response_format``
(/v1) by default, so Navi's default ``auto`` tool step runs: a scripted reply is shaped to the
schema as a grammar would (``_shaped``), and Navi's support probe is answered "yes". A test whose
subject is a server that ignores schemas opts out: ``LLMServer(schemas=set())``, ``server.schemas
= set()`` or ``--schemas none``.
"""
from __future__ import annotations

import argparse
import collections
import hashlib
import json
import math
import re
import select
import signal
import socket
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field, fields, replace
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Iterator

_NET_ERRORS = (BrokenPipeError, ConnectionResetError, ConnectionAbortedError)


@dataclass
class Turn:
    """One scripted assistant reply; ``tool_calls`` args given as ``str`` are sent raw (malformed-JSON tests).

    Real-server quirks: ``repeat_tool_name`` repeats the function name in every OpenAI tool-call
    chunk (llama-cpp-python); ``stream_error`` ends an HTTP 200 stream with that error object
    (a dict, or a string: Ollama ``{"error": str}``) and no finish line; ``no_finish`` ends it
    cleanly with no finish reason, no ``[DONE]``, no done line; ``endless`` streams ``content``
    over and over until the client hangs up. Each streamed piece counts as one token for the
    request's ``max_tokens`` / ``options.num_predict``: past it the reply stops with "length".
    """

    content: str = ""
    thinking: str = ""
    tool_calls: list[dict] = field(default_factory=list)
    chunk_size: int = 8
    delay: float = 0.0
    first_delay: float = 0.0
    hold: float = 0.0  # seconds before the status line: accepted, not one byte sent yet
    drop_after: int | None = None
    status: int = 200
    error: str = ""
    prompt_tokens: int = 10
    eval_tokens: int = 5
    repeat_tool_name: bool = False
    stream_error: Any = None
    no_finish: bool = False
    endless: bool = False
    # The content's streamed pieces when a schema shaped it (set by the server, never scripted):
    # the answer's text piece by piece inside its JSON, as a constrained model writes it.
    parts: list[str] = field(default_factory=list)

    @classmethod
    def from_obj(cls, obj: Turn | dict | str) -> Turn:
        """Accept a Turn, a dict of Turn fields (rules.json) or a bare content string."""
        if isinstance(obj, Turn):
            return obj
        if isinstance(obj, str):
            return cls(content=obj)
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in obj.items() if k in known})

    def pieces(self, text: str) -> list[str]:
        """Split text into streamed fragments of ``chunk_size`` characters."""
        if self.parts and text == self.content:
            return list(self.parts)
        n = self.chunk_size if self.chunk_size > 0 else max(len(text), 1)
        return [text[i:i + n] for i in range(0, len(text), n)]


@dataclass
class Rule:
    """Answer requests whose last user message contains ``match``; ``turns[k]`` for the k-th assistant step.

    ``system``, when set, must appear in a system message or in the last user message (where an
    instruction such as Navi's planning step is appended to keep the prompt prefix shared).
    """

    match: str
    turns: list[Turn]
    system: str = ""

    @classmethod
    def from_obj(cls, obj: Rule | dict) -> Rule:
        """Build from the JSON shape used by rules.json and the /_fake/rules endpoint."""
        if isinstance(obj, Rule):
            return obj
        return cls(match=obj.get("match", ""), turns=[Turn.from_obj(t) for t in obj["turns"]],
                   system=obj.get("system", ""))


def talk(count: int, word: str = "word", sep: str = " ") -> str:
    """A long answer of `count` different words (word0 word1 …): the same word over and over
    would be cut by Navi as an answer that repeats itself (agent/turn/runaway.py)."""
    return sep.join(f"{word}{i}" for i in range(count)) + sep


def _text(content: Any) -> str:
    """Message content as text (OpenAI allows a list of typed parts)."""
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content if isinstance(content, str) else ""


def _now_iso() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"))


class _Dropped(Exception):
    """The stream ended early: scripted drop, client disconnect or server stop."""


class LLMServer:
    """Fake Ollama/OpenAI server in a background thread.

    Priority for choosing a reply: the ``script()`` FIFO, then rules in insertion
    order (first match wins), then ``Turn(content="echo: <last user content>")`` (the user's
    own words: what Navi writes under them after a ``---`` line is left out).
    """

    def __init__(self, models: list[str] | None = None, api_key: str | None = None,
                 host: str = "127.0.0.1", port: int = 0, schemas: set[str] | None = None) -> None:
        """``schemas``: the schema fields enforced (default OLLAMA_SCHEMAS, as Ollama does);
        ``set()`` for a server that ignores them (text tool-call recovery, the probe's "no")."""
        self.models = models
        self.api_key = api_key
        # /api/show per model name (without ":latest"); unknown models get DEFAULT_SHOW.
        # A model whose capabilities lack "thinking" answers 400 to `think: true`, as Ollama does.
        self.model_show: dict[str, dict] = {}
        # Extra fields of each /v1/models entry (vLLM's {"max_model_len": 4096}, llama.cpp's
        # {"meta": {"n_ctx": 4096}}) and the body of llama.cpp's GET /props (404 when None).
        self.openai_model_meta: dict = {}
        self.props: dict | None = None
        # The request fields whose JSON schema this server enforces, as a grammar would: "format"
        # (Ollama), "response_format" (json_schema), "json_schema" (llama.cpp). By default the two
        # Ollama enforces (`format` on /api/chat, `response_format` on /v1), so tests run Navi's
        # default path; others are ignored, as servers ignore fields they do not know. A scripted
        # reply that does not follow an enforced schema is made to, as a grammar would
        # (``_shaped``): a scripted tool call, or a tool the user's words name, becomes that call;
        # otherwise the schema's first branch, its minimal value with the scripted text in its free
        # string field. A scripted text the schema has no room for (a step that may only say
        # {"name": "answer"}) is not used up: the model's next, free call writes it. Navi's support
        # probe (schema title "navi_probe") is answered here without using the script, kept in ``probes``.
        self.schemas: set[str] = set(OLLAMA_SCHEMAS if schemas is None else schemas)
        # Set to a Semaphore to write a stream in lockstep with a test: each piece after the first
        # waits for a release (the test releases once it has seen what the last piece showed).
        self.piece_gate: threading.Semaphore | None = None
        # /api/pull: each pull's model name, names that fail, the progress parts and their pace.
        self.pulls: list[str] = []
        self.unpullable: set[str] = set()
        self.pull_steps = 4
        self.pull_delay = 0.0
        self.pull_status = 0  # non-zero: /api/pull answers that HTTP status (a server that cannot pull)
        self.pull_fails_with = ""  # an error line after some progress ("no space left on device")
        self.pulls_cancelled: list[str] = []  # pulls whose client hung up before the end
        # Embedding models this server has (/api/embed, /v1/embeddings); None = any name embeds.
        # An empty list is a server where no embedding model was pulled (404, as Ollama says).
        self.embed_models: list[str] | None = None
        # Set to an Event to hold every embedding answer until the test sets it (a slow model).
        self.embed_gate: threading.Event | None = None
        self.embed_delay = 0.0  # seconds each embedding answer takes (a model that is slow, steadily)
        # text -> vector: answer with these (a real model's vectors, precomputed) instead of
        # `embed_text`; a text not in it is a 400 naming it, so a test sees what it lacks.
        self.embed_table: dict[str, list[float]] | None = None
        self._embeds: list[dict] = []
        self._probes: list[dict] = []
        self._addr = (host, port)
        self._cond = threading.Condition()
        self._queue: collections.deque[Turn] = collections.deque()
        self._rules: list[Rule] = []
        self._requests: list[dict] = []
        self._shows: list[str] = []
        self._active = self._max_active = 0
        self._disconnects = 0
        self._conns: set[socket.socket] = set()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._port: int | None = None

    # -- lifecycle ---------------------------------------------------------
    def start(self) -> LLMServer:
        httpd = _HTTPServer(self._addr, _Handler)
        httpd.fake = self
        self._httpd, self._stopping, self._port = httpd, False, httpd.server_address[1]
        self._thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="fake-llm-server", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop accepting and cut every open connection so no handler thread lingers."""
        if not self._httpd:
            return
        self._stopping = True
        self._httpd.shutdown()
        with self._cond:
            conns = list(self._conns)
        for s in conns:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self._httpd.server_close()
        self._httpd = None

    def __enter__(self) -> LLMServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        assert self._port is not None, "server not started"
        return self._port

    @property
    def url(self) -> str:
        return f"http://{self._addr[0]}:{self.port}"

    @property
    def openai_url(self) -> str:
        return self.url + "/v1"

    # -- scripting ---------------------------------------------------------
    def script(self, *turns: Turn | dict | str) -> None:
        """Queue replies consumed one per chat request, before any rule."""
        with self._cond:
            self._queue.extend(Turn.from_obj(t) for t in turns)

    def add_rule(self, rule: Rule | dict) -> None:
        with self._cond:
            self._rules.append(Rule.from_obj(rule))

    def reset(self) -> None:
        with self._cond:
            self._queue.clear()
            self._rules.clear()
            self._requests.clear()
            self._probes.clear()
            self._embeds.clear()
            self._shows.clear()
            self.pulls.clear()
            self.pulls_cancelled.clear()
            self.pull_status, self.pull_fails_with = 0, ""
            self._max_active = self._active
            self._disconnects = 0

    @property
    def requests(self) -> list[dict]:
        """Snapshot of POSTed JSON bodies plus ``path`` and ``authorization`` (header value or None)."""
        with self._cond:
            return list(self._requests)

    @property
    def probes(self) -> list[dict]:
        """Schema-support probes received (not part of ``requests``)."""
        with self._cond:
            return list(self._probes)

    @property
    def embeds(self) -> list[dict]:
        """The embedding requests (path, model, input count, longest input's characters), kept
        apart from the chat calls."""
        with self._cond:
            return list(self._embeds)

    def embed_known(self, model: str) -> bool:
        if self.embed_models is None:
            return True
        return model.removesuffix(":latest") in {m.removesuffix(":latest") for m in self.embed_models}

    def _record_embed(self, rec: dict) -> None:
        with self._cond:
            self._embeds.append(rec)

    def _record_probe(self, rec: dict) -> None:
        with self._cond:
            self._probes.append(rec)

    @property
    def disconnects(self) -> int:
        with self._cond:
            return self._disconnects

    def wait_for_requests(self, n: int, timeout: float = 10) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: len(self._requests) >= n, timeout)

    def wait_for_disconnect(self, timeout: float = 10, count: int = 1) -> bool:
        """True once ``count`` clients have hung up before their stream finished."""
        with self._cond:
            return self._cond.wait_for(lambda: self._disconnects >= count, timeout)

    # -- internals used by the handler -------------------------------------
    def _record(self, rec: dict) -> None:
        with self._cond:
            self._requests.append(rec)
            self._cond.notify_all()

    def _busy(self, delta: int) -> None:
        with self._cond:
            self._active += delta
            self._max_active = max(self._max_active, self._active)

    @property
    def max_active(self) -> int:
        """The most chat replies in progress at once (a single-slot server would queue the rest)."""
        with self._cond:
            return self._max_active

    def _record_show(self, model: str) -> None:
        with self._cond:
            self._shows.append(model)

    @property
    def shows(self) -> list[str]:
        """Models asked about on /api/show (not part of ``requests``)."""
        with self._cond:
            return list(self._shows)

    def _note_disconnect(self) -> None:
        with self._cond:
            self._disconnects += 1
            self._cond.notify_all()

    def _track(self, sock: socket.socket, add: bool) -> None:
        with self._cond:
            (self._conns.add if add else self._conns.discard)(sock)

    def show(self, model: str) -> dict:
        """What /api/show reports: ``{"capabilities": [...], "context_length": int}`` (and
        ``"parameter_count"`` when a test sets it: model_info's general.parameter_count)."""
        return {**DEFAULT_SHOW, **self.model_show.get(model.removesuffix(":latest"), {})}

    def add_model(self, name: str) -> None:
        """List one more model (a finished pull); a server that knew every name lists it too."""
        with self._cond:
            have = self.models if self.models is not None else self.every_model()
            if not any(m.removesuffix(":latest") == name.removesuffix(":latest") for m in have):
                self.models = [*have, name]

    def every_model(self) -> list[str]:
        """What a server that has every model lists: its own, and the defaults Navi is configured
        with now (a real server that has them lists them; Navi checks the default against it)."""
        names = ["fake-llm:latest"]
        try:
            from django.conf import settings

            names += [m for m in (settings.OLLAMA_DEFAULT_MODEL, settings.OPENAI_MODEL) if m and m not in names]
        except Exception:  # noqa: BLE001 - used outside Django (bench): its own model only
            pass
        return names

    def model_known(self, model: str) -> bool:
        if self.models is None:
            return True
        base = model.removesuffix(":latest")
        return any(m.removesuffix(":latest") == base for m in self.models)

    def pick_turn(self, messages: list[dict], keep: Callable[[Turn], bool] | None = None) -> Turn:
        """FIFO first, then rules keyed by (last user text, #assistant msgs after it), else echo.
        A FIFO turn for which ``keep`` is true stays queued for the next request."""
        last_user = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=-1)
        user_text = _text(messages[last_user].get("content")) if last_user >= 0 else ""
        k = sum(1 for m in messages[last_user + 1:] if m.get("role") == "assistant")
        systems = [_text(m.get("content")) for m in messages if m.get("role") == "system"]
        system = "\n".join(systems + [user_text]) if systems else None
        with self._cond:
            if self._queue:
                if keep is not None and keep(self._queue[0]):
                    return self._queue[0]
                return self._queue.popleft()
            for rule in self._rules:
                if rule.match in user_text and rule.turns and (
                        not rule.system or (system is not None and rule.system in system)):
                    return rule.turns[min(k, len(rule.turns) - 1)]
        return Turn(content=f"echo: {_user_words(messages)}")


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256  # default 5 makes 50 simultaneous connects stall on SYN retries
    fake: LLMServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], OSError):  # client hang-ups are expected here
            super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # tiny chunks must leave immediately
    server: _HTTPServer

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - silence access log
        pass

    def setup(self) -> None:
        super().setup()
        self.server.fake._track(self.connection, True)

    def finish(self) -> None:
        self.server.fake._track(self.connection, False)
        try:
            super().finish()
        except OSError:
            pass

    # -- plumbing ----------------------------------------------------------
    def _send_json(self, status: int, obj: Any) -> None:
        body = _dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _error(self, status: int, msg: str) -> None:
        """Ollama errors are ``{"error": str}``; OpenAI-compatible ones nest an object."""
        if self.path.startswith("/v1/"):
            etype = "invalid_request_error" if status < 500 else "api_error"
            self._send_json(status, {"error": {"message": msg, "type": etype, "param": None, "code": status}})
        else:
            self._send_json(status, {"error": msg})

    def _wait(self, seconds: float) -> None:
        """Sleep, but notice promptly if the client hung up (EOF on the socket) or the server stops."""
        if seconds <= 0:
            return
        deadline = time.monotonic() + seconds
        if (poller := getattr(self, "_poller", None)) is None:
            poller = self._poller = select.poll()
            poller.register(self.connection, select.POLLIN | select.POLLHUP | select.POLLERR)
        while (left := deadline - time.monotonic()) > 0:
            if self.server.fake._stopping:
                raise _Dropped
            if not poller.poll(min(left, 0.1) * 1000):
                continue
            try:
                peek = self.connection.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
            except BlockingIOError:
                continue
            except OSError:
                peek = b""
            if not peek:
                self.server.fake._note_disconnect()
                raise _Dropped
            time.sleep(max(0.0, deadline - time.monotonic()))  # pipelined data, not EOF: plain sleep
            return

    def _stream(self, turn: Turn, ctype: str, frames: Iterator[str], tail: Callable[[], list[str]]) -> None:
        """Write ``frames`` as HTTP chunks with the turn's pacing, then ``tail()`` (the 'done' part)."""
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        write, fake = self.wfile.write, self.server.fake
        try:
            self._wait(turn.first_delay)
            for i, frame in enumerate(frames):
                if turn.drop_after is not None and i >= turn.drop_after:
                    raise _Dropped
                if i and turn.delay:
                    self._wait(turn.delay)
                if i and fake.piece_gate is not None and not fake.piece_gate.acquire(timeout=30):
                    raise _Dropped
                if fake._stopping:
                    raise _Dropped
                data = frame.encode()
                write(b"%x\r\n%s\r\n" % (len(data), data))
            if turn.drop_after is not None:  # fewer frames than drop_after: still no final line
                raise _Dropped
            data = "".join(tail()).encode()
            write((b"%x\r\n%s\r\n" % (len(data), data) if data else b"") + b"0\r\n\r\n")
        except _NET_ERRORS:
            fake._note_disconnect()
            self.close_connection = True
        except _Dropped:
            self.close_connection = True
            try:
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    # -- routing -----------------------------------------------------------
    def do_HEAD(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_GET(self) -> None:
        fake, path = self.server.fake, self.path.split("?")[0]
        names = fake.models if fake.models is not None else fake.every_model()  # [] = a server with none
        if path == "/":
            body = b"Ollama is running"
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        elif path == "/api/version":
            self._send_json(200, {"version": "0.12.0"})
        elif path == "/api/tags":
            self._send_json(200, {"models": [{"name": n, "model": n, "modified_at": _now_iso(), "size": 1 << 30,
                                              "digest": uuid.uuid5(uuid.NAMESPACE_DNS, n).hex * 2,
                                              "details": _DETAILS} for n in names]})
        elif path == "/v1/models":
            if self._auth_ok():
                self._send_json(200, {"object": "list", "data": [
                    {"id": n, "object": "model", "created": int(time.time()), "owned_by": "library",
                     **fake.openai_model_meta} for n in names]})
        elif path == "/props" and fake.props is not None:
            self._send_json(200, fake.props)
        elif path == "/_fake/state":
            self._send_json(200, {"requests": fake.requests, "disconnects": fake.disconnects})
        else:
            self._error(404, "404 page not found")

    def _auth_ok(self) -> bool:
        key = self.server.fake.api_key
        if key and self.headers.get("Authorization") != f"Bearer {key}":
            self._error(401, "Incorrect API key provided" if self.path.startswith("/v1/") else "unauthorized")
            return False
        return True

    def do_POST(self) -> None:
        fake, path = self.server.fake, self.path.split("?")[0]
        try:
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            body = json.loads(raw or b"{}")
            if not isinstance(body, (dict, list)):
                raise ValueError
        except ValueError:
            return self._error(400, "invalid JSON body")
        if path.startswith("/_fake/"):
            return self._control(path, body)
        if not isinstance(body, dict):
            return self._error(400, "expected a JSON object")
        if path == "/api/pull":  # model management, kept apart so `requests` stays the chat calls
            return self._pull(body)
        if path in ("/api/embed", "/v1/embeddings"):
            return self._embed(path, body)
        via, schema = _schema_of(body)
        probe = isinstance(schema, dict) and schema.get("title") == "navi_probe"
        if path == "/api/show":  # metadata, kept apart so `requests` stays the chat calls
            fake._record_show(body.get("model", ""))
        elif probe:
            fake._record_probe({**body, "path": path})
        else:
            fake._record({**body, "path": path, "authorization": self.headers.get("Authorization")})
        if not self._auth_ok():
            return
        model = body.get("model", "")
        if path not in ("/api/chat", "/api/show", "/v1/chat/completions"):
            return self._error(404, "404 page not found")
        if not fake.model_known(model):
            return self._error(404, f'model "{model}" not found, try pulling it first')
        if path == "/api/show":
            shown = fake.show(model)
            return self._send_json(200, {"modelfile": f"FROM {model}", "parameters": "", "template": "{{ .Prompt }}",
                                         "details": _DETAILS, "modified_at": _now_iso(),
                                         "model_info": {"general.architecture": "llama",
                                                        "llama.context_length": shown["context_length"],
                                                        **({"general.parameter_count": shown["parameter_count"]}
                                                           if shown.get("parameter_count") else {})},
                                         "capabilities": shown["capabilities"]})
        if path == "/api/chat" and body.get("think") and "thinking" not in fake.show(model)["capabilities"]:
            return self._error(400, f'"{model}" does not support thinking')
        enforced = schema is not None and via in fake.schemas
        if probe:
            value = schema["properties"]["probe"]["enum"][0]
            # One piece: a test's lockstep (piece_gate) is for the chat's own replies.
            turn = Turn(content=_dumps({"probe": value}) if enforced else "Hello! How can I help you today?", chunk_size=0)
        else:
            turn = fake.pick_turn(body.get("messages") or [],
                                  keep=(lambda t: _no_room(schema, t)) if enforced else None)
        if enforced and not probe and turn.status == 200 and _breaks(schema, turn):
            turn = _shaped(schema, turn, _request_words(body.get("messages") or []))
        if turn.hold:
            try:
                self._wait(turn.hold)
            except _Dropped:
                self.close_connection = True
                return
        if turn.status != 200:
            return self._error(turn.status, turn.error or f"error {turn.status}")
        fake._busy(+1)
        try:
            if path == "/api/chat":
                self._ollama(body, model, turn)
            else:
                self._openai(body, model, turn)
        finally:
            fake._busy(-1)

    def _pull(self, body: dict) -> None:
        """Ollama's /api/pull: NDJSON progress (manifest, one layer in ``pull_steps`` parts,
        success), then the model is listed. A name in ``unpullable`` ends with an error line."""
        fake, name = self.server.fake, str(body.get("model") or body.get("name") or "")
        with fake._cond:
            fake.pulls.append(name)
        if fake.pull_status:  # a server without Ollama's pull (an OpenAI-compatible one, a proxy)
            return self._error(fake.pull_status, "404 page not found" if fake.pull_status == 404 else "method not allowed")
        if not name or name in fake.unpullable:
            return self._send_json(200 if name else 400, {"error": "pull model manifest: file does not exist"})
        total = 1 << 30
        lines = [{"status": "pulling manifest"}]
        lines += [{"status": "pulling 6a0746a1ec1a", "digest": "sha256:6a0746a1ec1a", "total": total,
                   "completed": total * k // fake.pull_steps} for k in range(1, fake.pull_steps + 1)]
        lines += [{"status": "verifying sha256 digest"}, {"status": "writing manifest"}, {"status": "success"}]
        if fake.pull_fails_with:  # e.g. a full disk, after some progress
            lines = [*lines[:2], {"error": fake.pull_fails_with}]
        self.send_response(200)
        self.send_header("Content-Type", "application/x-ndjson")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        try:
            for i, line in enumerate(lines):
                if i == len(lines) - 1 and not fake.pull_fails_with:
                    fake.add_model(name)
                data = (_dumps(line) + "\n").encode()
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()
                if fake.pull_delay and i < len(lines) - 1:
                    self._wait(fake.pull_delay)
            self.wfile.write(b"0\r\n\r\n")
        except (_Dropped, *_NET_ERRORS):
            self.close_connection = True
            with fake._cond:
                fake.pulls_cancelled.append(name)  # the client hung up mid-pull (Cancel)

    def _embed(self, path: str, body: dict) -> None:
        """Ollama `POST /api/embed` and OpenAI `POST /v1/embeddings`: one vector per input, from
        `embed_text` (deterministic; chosen synonyms land close)."""
        fake = self.server.fake
        model, given = str(body.get("model") or ""), body.get("input")
        texts = [given] if isinstance(given, str) else given
        fake._record_embed({"path": path, "model": model, "inputs": len(texts) if isinstance(texts, list) else 0,
                            "longest": max((len(t) for t in texts if isinstance(t, str)), default=0)
                            if isinstance(texts, list) else 0})
        if not self._auth_ok():
            return
        if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
            return self._error(400, "input must be a string or a list of strings")
        if not fake.embed_known(model):
            return self._error(404, f'model "{model}" not found, try pulling it first')
        if fake.embed_table is not None and (unknown := [t for t in texts if t not in fake.embed_table]):
            return self._error(400, f"no precomputed vector for {unknown[0][:200]!r}")
        vectors = [fake.embed_table[t] if fake.embed_table is not None else embed_text(t) for t in texts]
        if fake.embed_gate is not None:
            fake.embed_gate.wait(timeout=60)
        if fake.embed_delay:
            time.sleep(fake.embed_delay)
        if path == "/api/embed":
            return self._send_json(200, {"model": model, "embeddings": vectors, "total_duration": 1000,
                                         "load_duration": 10, "prompt_eval_count": sum(len(t.split()) for t in texts)})
        data = [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vectors)]
        tokens = sum(len(t.split()) for t in texts)
        self._send_json(200, {"object": "list", "data": data, "model": model,
                              "usage": {"prompt_tokens": tokens, "total_tokens": tokens}})

    def _control(self, path: str, body: Any) -> None:
        """Script a server living in another process (CLI mode): /_fake/script|rules|reset."""
        fake = self.server.fake
        if path == "/_fake/script":
            fake.script(*body)
        elif path == "/_fake/rules":
            for r in body:
                fake.add_rule(r)
        elif path == "/_fake/reset":
            fake.reset()
        else:
            return self._error(404, "unknown control endpoint")
        self._send_json(200, {"ok": True})

    def _non_stream_wait(self, turn: Turn, n_frames: int) -> bool:
        """Emulate generation latency for ``stream: false``; False if the reply must not be sent."""
        try:
            self._wait(turn.first_delay + turn.delay * max(n_frames - 1, 0))
        except _Dropped:
            self.close_connection = True
            return False
        if turn.drop_after is not None:
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return False
        return True

    # -- Ollama ------------------------------------------------------------
    def _ollama(self, body: dict, model: str, turn: Turn) -> None:
        thinking = turn.thinking if body.get("think") is not False else ""
        calls = [{"function": {"name": c["name"], "arguments": c.get("arguments", {})}} for c in turn.tool_calls]
        budget = _Budget((body.get("options") or {}).get("num_predict"))
        stats = {"done_reason": "stop", "done": True, "total_duration": 123_000_000, "load_duration": 1_000_000,
                 "prompt_eval_count": turn.prompt_tokens, "prompt_eval_duration": 10_000_000,
                 "eval_count": turn.eval_tokens, "eval_duration": 100_000_000}
        if body.get("stream", True) is False:
            msg: dict[str, Any] = {"role": "assistant", "content": turn.content}
            if thinking:
                msg["thinking"] = thinking
            if calls:
                msg["tool_calls"] = calls
            n = len(turn.pieces(thinking)) + len(turn.pieces(turn.content)) + bool(calls)
            if self._non_stream_wait(turn, n):
                self._send_json(200, {"model": model, "created_at": _now_iso(), "message": msg, **stats})
            return

        def frames() -> Iterator[str]:
            for key, piece in budget.take(_pieces(turn, thinking)):
                msg = {"role": "assistant", "content": "", key: piece}
                yield _dumps({"model": model, "created_at": _now_iso(), "message": msg, "done": False}) + "\n"
            if calls and not budget.exhausted:
                msg = {"role": "assistant", "content": "", "tool_calls": calls}
                yield _dumps({"model": model, "created_at": _now_iso(), "message": msg, "done": False}) + "\n"

        def tail() -> list[str]:
            if turn.no_finish:
                return []
            if turn.stream_error is not None:
                return [_dumps({"error": turn.stream_error}) + "\n"]
            msg = {"role": "assistant", "content": ""}
            final = {**stats, "done_reason": "length"} if budget.exhausted else stats
            return [_dumps({"model": model, "created_at": _now_iso(), "message": msg, **final}) + "\n"]

        self._stream(turn, "application/x-ndjson", frames(), tail)

    # -- OpenAI ------------------------------------------------------------
    def _openai(self, body: dict, model: str, turn: Turn) -> None:
        cid, created = f"chatcmpl-{uuid.uuid4().hex[:24]}", int(time.time())
        calls = [{"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function",
                  "function": {"name": c["name"], "arguments": a if isinstance(a := c.get("arguments", {}), str)
                               else _dumps(a)}} for c in turn.tool_calls]
        finish = "tool_calls" if calls else "stop"
        budget = _Budget(body.get("max_tokens") or body.get("max_completion_tokens"))
        usage = {"prompt_tokens": turn.prompt_tokens, "completion_tokens": turn.eval_tokens,
                 "total_tokens": turn.prompt_tokens + turn.eval_tokens}
        if not body.get("stream"):
            msg: dict[str, Any] = {"role": "assistant", "content": turn.content or (None if calls else "")}
            if turn.thinking:
                msg["reasoning_content"] = turn.thinking
            if calls:
                msg["tool_calls"] = calls
            n = len(turn.pieces(turn.thinking)) + len(turn.pieces(turn.content)) + len(calls)
            if self._non_stream_wait(turn, n):
                self._send_json(200, {"id": cid, "object": "chat.completion", "created": created, "model": model,
                                      "choices": [{"index": 0, "message": msg, "finish_reason": finish}],
                                      "usage": usage})
            return

        def chunk(delta: dict, finish_reason: str | None = None) -> str:
            return "data: " + _dumps({"id": cid, "object": "chat.completion.chunk", "created": created,
                                      "model": model, "choices": [{"index": 0, "delta": delta,
                                                                   "finish_reason": finish_reason}]}) + "\n\n"

        def deltas() -> Iterator[dict]:
            for key, piece in budget.take(_pieces(turn, turn.thinking, "reasoning_content")):
                yield {key: piece}
            if budget.exhausted:
                return
            for i, c in enumerate(calls):
                fn = c["function"]
                yield {"tool_calls": [{"index": i, "id": c["id"], "type": "function",
                                       "function": {"name": fn["name"], "arguments": ""}}]}
                for piece in turn.pieces(fn["arguments"]):
                    named = {"name": fn["name"]} if turn.repeat_tool_name else {}
                    yield {"tool_calls": [{"index": i, "function": {**named, "arguments": piece}}]}

        def frames() -> Iterator[str]:
            for i, d in enumerate(deltas()):
                yield chunk({"role": "assistant", **d} if i == 0 else d)

        def tail() -> list[str]:
            if turn.no_finish:
                return []
            if turn.stream_error is not None:
                error = turn.stream_error
                if not isinstance(error, dict):
                    error = {"code": 500, "message": str(error), "type": "server_error"}
                return ["data: " + _dumps({"error": error}) + "\n\n"]
            out = [chunk({}, "length" if budget.exhausted else finish)]
            if (body.get("stream_options") or {}).get("include_usage"):
                out.append("data: " + _dumps({"id": cid, "object": "chat.completion.chunk", "created": created,
                                              "model": model, "choices": [], "usage": usage}) + "\n\n")
            out.append("data: [DONE]\n\n")
            return out

        self._stream(turn, "text/event-stream", frames(), tail)


# --- embeddings ---------------------------------------------------------------------------
EMBED_DIM = 128
# Words of one group share a meaning: their vectors point the same way, so a test can show that
# search by meaning finds "espresso" for "coffee" where the words share nothing.
SYNONYMS = [
    {"coffee", "espresso", "latte", "cappuccino", "caffeine", "barista"},
    {"car", "automobile", "vehicle", "sedan"},
    {"doctor", "physician", "gp", "clinic"},
    {"holiday", "vacation", "trip", "journey"},
    {"dog", "puppy", "hound", "canine"},
    {"money", "cash", "salary", "income", "wage"},
    {"house", "home", "apartment", "flat", "residence"},
    {"sick", "ill", "illness", "disease", "unwell"},
    {"password", "passphrase", "credentials", "login"},
    {"cancel", "terminate", "end", "quit"},
    {"contract", "agreement", "lease"},
    {"refund", "reimbursement", "repayment"},
    # Requests for a tool in words its description never uses (agent.toolcalling.toolmeaning).
    {"todo", "chore", "errand"},
    {"sunrise", "dawn", "daybreak"},
]
_CONCEPT = {word: min(group) for group in SYNONYMS for word in group}


def _bucket(word: str) -> tuple[int, float]:
    digest = hashlib.sha256(word.encode()).digest()
    return digest[0] % EMBED_DIM, 1.0 if digest[1] % 2 else -1.0


def embed_text(text: str) -> list[float]:
    """A deterministic unit vector: each word (its synonym group's, if it has one) adds to one
    hashed dimension. Numbers carry no meaning here, as in small real models: exact numbers
    are the words' job."""
    vector = [0.0] * EMBED_DIM
    for word in re.findall(r"[^\W\d_]+", text.lower()):
        word = _CONCEPT.get(word) or _CONCEPT.get(word.removesuffix("s")) or word
        index, sign = _bucket(word)
        vector[index] += sign
    norm = math.sqrt(sum(v * v for v in vector))
    if not norm:
        vector[0], norm = 1.0, 1.0  # no words: still a valid vector, close to nothing in particular
    return [round(v / norm, 6) for v in vector]


def _schema_of(body: dict) -> tuple[str, Any]:
    """(the field, the JSON schema) a request asks the reply to follow, or ("", None)."""
    if isinstance(body.get("format"), dict):
        return "format", body["format"]
    rf = body.get("response_format")
    if isinstance(rf, dict) and rf.get("type") == "json_schema" and isinstance(rf.get("json_schema"), dict):
        return "response_format", rf["json_schema"].get("schema")
    if isinstance(body.get("json_schema"), dict):
        return "json_schema", body["json_schema"]
    return "", None


def _violation(value: Any, schema: dict) -> str:
    """Why `value` does not follow `schema` ("" if it does). The schema itself is not checked
    against its meta-schema (`jsonschema.validate` does: ~0.6 s for a step's schema of 30 tools)."""
    import jsonschema

    error = jsonschema.exceptions.best_match(jsonschema.validators.validator_for(schema)(schema).iter_errors(value))
    return "" if error is None else str(error).splitlines()[0]


def _breaks(schema: dict, turn: Turn) -> str:
    """Why a scripted reply could not have come from a server enforcing `schema` ("" if it could)."""
    try:
        value = json.loads(turn.content)
    except ValueError as exc:
        return str(exc)
    return _violation(value, schema)


def _no_room(schema: dict, turn: Turn) -> bool:
    """A scripted text answer that `schema` has no place for (its answer branch has no free
    string): the model decides to answer, and writes this text in its next, free call."""
    if turn.status != 200 or turn.tool_calls or not turn.content or not _breaks(schema, turn):
        return False
    branches = schema.get("anyOf") if isinstance(schema.get("anyOf"), list) else [schema]
    return bool(branches) and _free_string(branches[0]) is None


def _user_words(messages: list[dict]) -> str:
    """The last user message as its writer wrote it: an instruction Navi appends after a
    ``---`` line (its step note, which names tools) is not the user's."""
    users = [_text(m.get("content")) for m in messages if m.get("role") == "user"]
    return users[-1].split("\n\n---\n", 1)[0] if users else ""


def _request_words(messages: list[dict]) -> str:
    """The user's request while no tool has answered it yet, else "": a model calls the tool a
    request names at its first step, and answers after the result. A user message right after a
    tool result carries that result (an image a tool loaded), it is not a request."""
    asks = [i for i, m in enumerate(messages)
            if m.get("role") == "user" and not (i and messages[i - 1].get("role") == "tool")]
    if not asks or any(m.get("role") == "tool" for m in messages[asks[-1] + 1:]):
        return ""
    return _user_words(messages[:asks[-1] + 1])


def _shaped(schema: dict, turn: Turn, words: str) -> Turn:
    """What a server enforcing `schema` sends for the scripted `turn`: a scripted tool call the
    schema allows, or a tool named in the request's `words` (_request_words), as ``{"name", "arguments"}``; else the
    schema's first branch at its minimal valid value, the scripted text in its first free
    string field (an answer's text), streamed piece by piece inside the JSON."""
    branches = schema.get("anyOf") if isinstance(schema.get("anyOf"), list) else [schema]
    named = {b.get("properties", {}).get("name", {}).get("const"): b for b in branches if isinstance(b, dict)}
    for call in turn.tool_calls:
        if call.get("name") in named and "arguments" in named[call["name"]].get("properties", {}):
            value = {"name": call["name"], "arguments": call.get("arguments", {})}
            if _violation(value, named[call["name"]]):
                fitted = _fitted(call.get("arguments"), named[call["name"]]["properties"]["arguments"])
                value = _minimal(named[call["name"]]) if fitted is None else {"name": call["name"], "arguments": fitted}
            return replace(turn, content=_dumps(value), tool_calls=[], parts=[])
    for name, branch in named.items():
        if isinstance(name, str) and "arguments" in branch.get("properties", {}) and re.search(
                rf"(?<![\w-]){re.escape(name)}(?![\w-])", words):
            return replace(turn, content=_dumps(_minimal(branch)), tool_calls=[], parts=[])
    branch = branches[0] if branches else {}
    value, key = _minimal(branch), _free_string(branch)
    if key is None or not turn.content:
        return replace(turn, content=_dumps(value), tool_calls=[], parts=[])
    value.pop(key, None)
    value[key] = ""  # written last, so the text streams at the end of the object
    head = _dumps(value)[:-2]  # `{"name":"answer","text":"` — the text is written from here
    # The text as JSON spells it (ASCII: `\n`, `\"`, `\u00e9`, a surrogate pair for 😀), cut every
    # `chunk_size` characters as a model's tokens cut it: `\` at the end of one piece and `n` at the
    # start of the next, `\u00e9` in the middle, a pair's two halves apart. The head comes with
    # the first piece, so a turn's `drop_after` and token cap count the text's pieces.
    parts = turn.pieces(_dumps(turn.content)[1:-1])
    parts[0] = head + parts[0]
    parts[-1] += '"}'
    return replace(turn, content="".join(parts), tool_calls=[], parts=parts)


def _fitted(args: Any, schema: Any) -> dict | None:
    """Scripted arguments as a grammar lets a model write them: of the schema's branches, the one
    that keeps most of them, each value kept where its field allows it and the required rest at
    its minimal value; None when no branch takes a dict."""
    if not isinstance(args, dict) or not isinstance(schema, dict):
        return None
    best: tuple[int, dict] | None = None
    for sub in schema.get("anyOf") if isinstance(schema.get("anyOf"), list) else [schema]:
        value, props = _minimal(sub), (sub.get("properties") if isinstance(sub, dict) else None) or {}
        if not isinstance(value, dict):
            continue
        kept = [k for k, v in args.items() if isinstance(props.get(k), dict) and not _violation(v, props[k])]
        value.update({k: args[k] for k in kept})
        if not _violation(value, sub) and (best is None or len(kept) > best[0]):
            best = (len(kept), value)
    return None if best is None else best[1]


def _free_string(schema: dict) -> str | None:
    """The last property of an object schema that is a string of any value (no const, no enum)."""
    props = schema.get("properties") if isinstance(schema, dict) else None
    free = [k for k, v in (props or {}).items() if isinstance(v, dict) and v.get("type") == "string"
            and "const" not in v and "enum" not in v]
    return free[-1] if free else None


def _minimal(schema: Any) -> Any:
    """The smallest value `schema` allows (required properties only, empty strings and lists)."""
    if not isinstance(schema, dict):
        return None
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return schema["enum"][0]
    for key in ("anyOf", "oneOf", "allOf"):
        if schema.get(key):
            return _minimal(schema[key][0])
    kind = schema.get("type")
    kind = kind[0] if isinstance(kind, list) and kind else kind
    if kind == "object" or (kind is None and "properties" in schema):
        props = schema.get("properties") or {}
        return {k: _minimal(props.get(k, {})) for k in schema.get("required") or []}
    if kind == "array":
        return [_minimal(schema.get("items", {})) for _ in range(schema.get("minItems") or 0)]
    if kind == "string":
        return "x" * (schema.get("minLength") or 0)
    if kind in ("integer", "number"):
        return schema.get("minimum", 0)
    if kind == "boolean":
        return False
    return None


def _pieces(turn: Turn, thinking: str, thinking_key: str = "thinking") -> Iterator[tuple[str, str]]:
    """(key, text) pieces of a streamed reply: thinking, then content (forever if ``endless``)."""
    for piece in turn.pieces(thinking):
        yield thinking_key, piece
    while True:
        for piece in turn.pieces(turn.content):
            yield "content", piece
        if not (turn.endless and turn.content):
            return


class _Budget:
    """The request's output cap, one streamed piece per token."""

    def __init__(self, limit: Any) -> None:
        self.limit = limit if isinstance(limit, int) and limit > 0 else None
        self.exhausted = False

    def take(self, pieces: Iterator[tuple[str, str]]) -> Iterator[tuple[str, str]]:
        for n, item in enumerate(pieces):
            if self.limit is not None and n >= self.limit:
                self.exhausted = True
                return
            yield item


# What Ollama enforces: a JSON schema in `format` (/api/chat) or `response_format` (/v1).
OLLAMA_SCHEMAS = frozenset({"format", "response_format"})

DEFAULT_SHOW = {"capabilities": ["completion", "tools", "thinking", "vision"], "context_length": 8192}

_DETAILS = {"parent_model": "", "format": "gguf", "family": "llama", "families": ["llama"],
            "parameter_size": "8B", "quantization_level": "Q4_K_M"}


def main(argv: list[str] | None = None) -> None:
    """CLI for out-of-process use (browser tests, benchmarks)."""
    ap = argparse.ArgumentParser(prog="python -m tests.llm_server", description=__doc__)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--rules", help="JSON file: list of {match, turns:[{...Turn fields}|str], system}")
    ap.add_argument("--models", help="comma-separated known models (others get 404)")
    ap.add_argument("--api-key", help="require 'Authorization: Bearer KEY'")
    ap.add_argument("--schemas", default=",".join(sorted(OLLAMA_SCHEMAS)),
                    help="comma-separated schema fields to enforce, as a real server does (format, response_format, "
                         "json_schema; default: Ollama's). 'none': a server that ignores schemas")
    args = ap.parse_args(argv)
    server = LLMServer(models=args.models.split(",") if args.models else None, api_key=args.api_key,
                       host=args.host, port=args.port,
                       schemas={s for s in args.schemas.split(",") if s and s != "none"})
    if args.rules:
        with open(args.rules, encoding="utf-8") as fh:
            for rule in json.load(fh):
                server.add_rule(rule)
    server.start()
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    print(f"LISTENING {server.url}", flush=True)
    stop.wait()
    server.stop()


if __name__ == "__main__":
    main()
