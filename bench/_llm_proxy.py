"""A counting reverse proxy between Navi and an LLM server (Ollama or OpenAI-compatible).

Every request is forwarded unchanged (except an optional cap on generated tokens; the fields that
constrain output — `response_format`, `json_schema`, `grammar`, `format`, vLLM's `guided_*` —
pass untouched) and streamed back as it arrives; the proxy keeps one record per chat request: the
label the bench set when it started, its duration, the usage the server reported (Ollama's
prompt_eval_count/eval_count, OpenAI's `usage`), whether it was constrained (and by which field),
and the assistant output it carried (text and native tool calls). That gives exact LLM call
counts for any server, and the raw outputs for the corpus.
"""

from __future__ import annotations

import http.client
import json
import re
import socket
import sys
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

CHAT_PATHS = ("/api/chat", "/chat/completions")
# Request fields with which a server constrains what the model may generate (schema or grammar).
CONSTRAINT_FIELDS = ("response_format", "json_schema", "grammar", "format", "guided_json", "guided_grammar",
                     "guided_regex", "guided_choice")
_HOP_HEADERS = {"connection", "keep-alive", "transfer-encoding", "content-length", "host", "accept-encoding"}


@dataclass
class CallRecord:
    label: str
    path: str
    model: str = ""
    started: float = 0.0
    ended: float = 0.0
    status: int = 0
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    content: str = ""
    tool_calls: list[dict] = field(default_factory=list)
    usage_estimated: bool = False  # the server reported none: counted with its tokenizer
    constrained: str = ""  # the request's constraint fields ("" = free generation)
    request: dict | None = None  # kept only when the proxy keeps requests (corpus capture)

    @property
    def seconds(self) -> float:
        return max(0.0, self.ended - self.started)


class LLMProxy:
    """`with LLMProxy("http://127.0.0.1:8080/v1") as proxy:` then point Navi at `proxy.url`;
    `proxy.label = "task/mode"` before a run, `proxy.records_for(label)` after it."""

    def __init__(self, upstream: str, max_tokens: int = 0, keep_requests: bool = False, parse_hermes: bool = False) -> None:
        parts = urlsplit(upstream.rstrip("/"))
        self.scheme, self.host = parts.scheme or "http", parts.hostname or "127.0.0.1"
        self.port = parts.port or (443 if self.scheme == "https" else 80)
        self.prefix = parts.path
        self.max_tokens = max_tokens
        self.keep_requests = keep_requests
        # Play a server that parses Hermes/Qwen `<tool_call>` blocks into native calls (Ollama,
        # llama-server --jinja, vLLM do for such models): see hermes_native().
        self.parse_hermes = parse_hermes
        self.label = ""
        self.records: list[CallRecord] = []
        self._lock = threading.Lock()
        self._tokenizer: bool | None = None  # False once the server turned out to have none
        self._inflight: dict[int, tuple[str, http.client.HTTPConnection]] = {}  # upstream requests
        self._httpd: ThreadingHTTPServer | None = None

    def start(self) -> "LLMProxy":
        httpd = _Server(("127.0.0.1", 0), _Handler)
        httpd.daemon_threads = True
        httpd.proxy = self  # type: ignore[attr-defined]
        self._httpd = httpd
        threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._httpd:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def __enter__(self) -> "LLMProxy":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        assert self._httpd is not None, "proxy not started"
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def records_for(self, label: str) -> list[CallRecord]:
        with self._lock:
            return [r for r in self.records if r.label == label]

    def _add(self, record: CallRecord) -> None:
        with self._lock:
            self.records.append(record)

    def _track(self, label: str, conn: http.client.HTTPConnection, add: bool) -> None:
        with self._lock:
            if add:
                self._inflight[id(conn)] = (label, conn)
            else:
                self._inflight.pop(id(conn), None)

    def busy(self, label: str | None = None) -> bool:
        with self._lock:
            return any(label is None or lab == label for lab, _ in self._inflight.values())

    def wait_done(self, label: str | None = None, timeout: float = 30) -> bool:
        """Until no request (of this label) is in flight: its record is then complete."""
        deadline = time.monotonic() + timeout
        while self.busy(label):
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)
        return True

    def abort(self, label: str) -> None:
        """Hang up the upstream requests of a run that was stopped (a long prompt evaluation
        sends nothing, so Navi's Stop alone would wait for it)."""
        with self._lock:
            conns = [conn for lab, conn in self._inflight.values() if lab == label]
        for conn in conns:
            try:
                conn.sock.shutdown(socket.SHUT_RDWR)
            except (AttributeError, OSError):
                pass

    def settle(self, timeout: float = 600) -> None:
        """Wait until the server is free again. llama-cpp-python's server goes on evaluating an
        abandoned prompt and serves one request at a time: its tokenizer endpoint answers only
        once it is idle. Other servers answer at once (or 404)."""
        self.wait_done(None, timeout)
        root = self.prefix.rsplit("/v1", 1)[0]
        conn = self.connection()
        conn.timeout = timeout
        try:
            conn.request("POST", root + "/extras/tokenize/count", body=b'{"input": "x"}',
                         headers={"Content-Type": "application/json"})
            conn.getresponse().read()
        except (OSError, http.client.HTTPException):
            pass
        finally:
            conn.close()

    def connection(self) -> http.client.HTTPConnection:
        cls = http.client.HTTPSConnection if self.scheme == "https" else http.client.HTTPConnection
        return cls(self.host, self.port, timeout=3600)

    def estimate_usage(self, record: CallRecord, body: dict) -> None:
        """Streamed answers of llama-cpp-python's server carry no usage: count the tokens of the
        messages, tools and output with the server's own tokenizer (`/extras/tokenize/count`),
        when it has one. The chat template's few tokens are not counted."""
        parts = [f"{m.get('role')}\n{_text(m.get('content'))}" for m in body.get("messages") or []]
        prompt = "\n".join(parts) + (json.dumps(body["tools"]) if body.get("tools") else "")
        output = record.content + "".join(json.dumps(c) for c in record.tool_calls)
        counts = [self._count(prompt), self._count(output) if output else 0]
        if None not in counts:
            record.prompt_tokens, record.completion_tokens = counts
            record.usage_estimated = True

    def _count(self, text: str) -> int | None:
        if self._tokenizer is False:
            return None
        root = self.prefix.rsplit("/v1", 1)[0]
        conn = self.connection()
        try:
            conn.request("POST", root + "/extras/tokenize/count", body=json.dumps({"input": text}).encode(),
                         headers={"Content-Type": "application/json"})
            response = conn.getresponse()
            data = response.read()
            if response.status != 200:
                self._tokenizer = False
                return None
            return int(json.loads(data)["count"])
        except (OSError, ValueError, KeyError):
            self._tokenizer = False
            return None
        finally:
            conn.close()

    def rewrite(self, body: dict) -> dict:
        """Cap generation when asked (a small model can ramble until the window is full)."""
        if not self.max_tokens:
            return body
        if "messages" in body and "options" not in body and "max_tokens" not in body and "max_completion_tokens" not in body:
            return {**body, "max_tokens": self.max_tokens}
        if isinstance(body.get("options"), dict) and "num_predict" not in body["options"]:
            return {**body, "options": {**body["options"], "num_predict": self.max_tokens}}
        return body


class _Server(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], OSError):  # Navi closing a kept-alive connection is normal
            super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: ThreadingHTTPServer

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - no access log
        pass

    def do_GET(self) -> None:
        self._forward()

    def do_HEAD(self) -> None:
        self._forward()

    def do_POST(self) -> None:
        self._forward()

    def _forward(self) -> None:
        proxy: LLMProxy = self.server.proxy  # type: ignore[attr-defined]
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        record = None
        if self.command == "POST" and self.path.split("?")[0].endswith(CHAT_PATHS):
            try:
                body = proxy.rewrite(json.loads(raw))
                raw = json.dumps(body).encode()
            except ValueError:
                body = {}
            record = CallRecord(label=proxy.label, path=self.path, model=str(body.get("model", "")), started=time.time(),
                                request=body if proxy.keep_requests else None, constrained=constraint_of(body))
        headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_HEADERS}
        if raw:
            headers["Content-Length"] = str(len(raw))
        upstream = proxy.connection()
        label = record.label if record else ""
        proxy._track(label, upstream, True)
        try:
            try:
                upstream.request(self.command, proxy.prefix + self.path, body=raw or None, headers=headers)
                response = upstream.getresponse()
            except (OSError, http.client.HTTPException) as exc:
                self._reply(502, json.dumps({"error": f"proxy: upstream failed: {exc}"}).encode())
                if record:
                    record.status, record.ended = 502, time.time()
                    proxy._add(record)
                return
            if proxy.parse_hermes and record and "event-stream" in (response.getheader("Content-Type") or ""):
                data = self._relay_parsed(response)
            else:
                data = self._relay(response, upstream)
            if record:
                record.status, record.ended = response.status, time.time()
                _parse_output(record, data, response.getheader("Content-Type") or "")
                if record.prompt_tokens is None and response.status == 200:
                    proxy.estimate_usage(record, body)
                proxy._add(record)
        finally:
            upstream.close()
            proxy._track(label, upstream, False)

    def _reply(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _relay(self, response: http.client.HTTPResponse, upstream: http.client.HTTPConnection) -> bytes:
        """Stream the upstream answer to the client chunk by chunk; returns all of it."""
        self.send_response(response.status)
        for key, value in response.getheaders():
            if key.lower() not in _HOP_HEADERS:
                self.send_header(key, value)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        parts: list[bytes] = []
        try:
            if self.command != "HEAD":
                while chunk := response.read1(65536):
                    parts.append(chunk)
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                    self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
        except (OSError, http.client.HTTPException):
            # Navi hung up (Stop), the bench aborted, or the server broke off: end both sides
            # (the caller closes upstream, so the server stops generating for us).
            self.close_connection = True
        return b"".join(parts)


    def _relay_parsed(self, response: http.client.HTTPResponse) -> bytes:
        """The whole SSE answer read first, then sent again with its well-formed `<tool_call>`
        blocks as native tool calls (hermes_native); returns what was sent."""
        try:
            upstream = response.read()
        except (OSError, http.client.HTTPException):
            upstream = b""
        data = hermes_native(upstream)
        self.send_response(response.status)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        try:
            self.wfile.write(data)
        except OSError:
            self.close_connection = True
        return data


def constraint_of(body: dict) -> str:
    """The fields that constrain this request's output, comma-separated ("" when none): a
    `response_format` of type text and an empty `format` constrain nothing."""
    found = []
    for key in CONSTRAINT_FIELDS:
        value = body.get(key)
        if value in (None, "", {}, []):
            continue
        if key == "response_format" and isinstance(value, dict) and value.get("type") == "text":
            continue
        found.append(key)
    return ",".join(found)


_HERMES = re.compile(r"<tool_call>\s*(\{.*?\})\s*</tool_call>", re.DOTALL)


def hermes_native(sse: bytes) -> bytes:
    """An OpenAI SSE answer with the `<tool_call>{"name": …, "arguments": {…}}</tool_call>`
    blocks of its text turned into native tool calls, as servers with a Hermes tool-call parser
    send them. Strict, like those parsers: a block must hold valid JSON with a string name and
    an object of arguments, else it stays text."""
    objects = [_json(line[5:].strip()) for line in sse.decode("utf-8", "replace").splitlines() if line.startswith("data:")]
    objects = [o for o in objects if o]
    text = "".join((c.get("delta") or {}).get("content") or "" for o in objects for c in o.get("choices") or [])
    finish = next((c.get("finish_reason") for o in reversed(objects) for c in o.get("choices") or [] if c.get("finish_reason")), "stop")
    calls = []
    for match in _HERMES.finditer(text):
        call = _json(match.group(1))
        if call and isinstance(call.get("name"), str) and isinstance(call.get("arguments"), dict):
            calls.append({"index": len(calls), "id": f"call_{len(calls)}", "type": "function",
                          "function": {"name": call["name"], "arguments": json.dumps(call["arguments"])}})
            text = text.replace(match.group(0), "", 1)
    base = {k: v for k, v in (objects[0] if objects else {}).items() if k != "choices"}
    chunks = []
    if text.strip():
        chunks.append({"index": 0, "delta": {"role": "assistant", "content": text.strip() if calls else text}, "finish_reason": None})
    if calls:
        chunks.append({"index": 0, "delta": {"tool_calls": calls}, "finish_reason": None})
    chunks.append({"index": 0, "delta": {}, "finish_reason": "tool_calls" if calls else finish})
    out = [b"data: " + json.dumps({**base, "choices": [c]}).encode() + b"\n\n" for c in chunks]
    return b"".join(out) + b"data: [DONE]\n\n"


def _parse_output(record: CallRecord, data: bytes, content_type: str) -> None:
    """Usage, text and tool calls from an NDJSON, SSE or plain JSON answer."""
    text = data.decode("utf-8", "replace")
    if "event-stream" in content_type or text.lstrip().startswith("data:"):
        objects = [_json(line[5:].strip()) for line in text.splitlines() if line.startswith("data:")]
    elif "ndjson" in content_type:
        objects = [_json(line) for line in text.splitlines() if line.strip()]
    else:
        objects = [_json(text)]
    calls: dict[int, dict] = {}
    for obj in filter(None, objects):
        if "prompt_eval_count" in obj or "eval_count" in obj:  # Ollama's final line
            record.prompt_tokens = int(obj.get("prompt_eval_count") or 0)
            record.completion_tokens = int(obj.get("eval_count") or 0)
        if isinstance(obj.get("usage"), dict):
            record.prompt_tokens = int(obj["usage"].get("prompt_tokens") or 0)
            record.completion_tokens = int(obj["usage"].get("completion_tokens") or 0)
        message = obj.get("message")  # Ollama
        if isinstance(message, dict):
            record.content += message.get("content") or ""
            for call in message.get("tool_calls") or []:
                calls[len(calls)] = dict(call.get("function") or {})
        for choice in obj.get("choices") or []:  # OpenAI: a delta (stream) or a message
            part = choice.get("delta") or choice.get("message") or {}
            record.content += part.get("content") or ""
            for call in part.get("tool_calls") or []:
                slot = calls.setdefault(int(call.get("index", len(calls))), {"name": "", "arguments": ""})
                fn = call.get("function") or {}
                slot["name"] += fn.get("name") or ""
                args = fn.get("arguments")
                slot["arguments"] = args if isinstance(args, dict) else slot["arguments"] + (args or "")
    record.tool_calls = [calls[i] for i in sorted(calls)]


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content if isinstance(content, str) else ""


def _json(text: str) -> dict | None:
    if not text or text == "[DONE]":
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None
