"""A fake speech server for tests and benchmarks: real HTTP on 127.0.0.1 speaking the OpenAI
audio API that Speaches, LocalAI, Kokoro-FastAPI and openedai-speech speak, so Navi's real
httpx client runs against it.

- `POST /v1/audio/transcriptions` (multipart: `file`, `model`, `response_format`, `language`)
  → `{"text"}`: `transcript` (a string, or a function of the request), after `stt_delay` s.
- `POST /v1/audio/speech` (JSON: `model`, `input`, `voice`, `response_format`) → audio of that
  format (WAV: a tone as long as the text; opus: Ogg/Opus; mp3: MPEG frames), headers after
  `tts_delay` s, the body in chunks of `chunk_bytes` (`chunk_delay` s apart).
A test fails the next calls (`fail("speech", 500, "model not found")`), requires a key
(`key="…"`: 401 without it) and waits on what arrived (`wait_for`).
"""

from __future__ import annotations

import email.parser
import email.policy
import functools
import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

from tests.audio_samples import mp3, ogg_opus, wav_tone

CONTENT_TYPES = {"mp3": "audio/mpeg", "opus": "audio/ogg", "aac": "audio/aac", "flac": "audio/flac", "wav": "audio/wav",
                 "pcm": "audio/pcm"}
SECONDS_PER_CHAR = 0.06


@dataclass
class Heard:
    """One request the server got."""

    kind: str  # "transcriptions" or "speech"
    fields: dict
    at: float  # time.monotonic() when it arrived
    file: tuple[str, str, bytes] | None = None  # (filename, content type, bytes)
    authorization: str = ""
    answered_at: float = 0.0  # when its last byte went out
    first_byte_at: float = 0.0
    extra: dict = field(default_factory=dict)


@functools.lru_cache(maxsize=256)
def audio_for(text: str, fmt: str, seconds: float | None = None) -> bytes:
    seconds = seconds if seconds is not None else max(0.3, min(20.0, len(text) * SECONDS_PER_CHAR))
    if fmt == "opus":
        return ogg_opus(seconds)
    if fmt == "mp3":
        return mp3(seconds)
    return wav_tone(seconds, 330.0, rate=24000)


class SpeechServer:
    def __init__(self, transcript: str | Callable[[Heard], str] = "hello navi", *, stt_delay: float = 0.0,
                 tts_delay: float = 0.0, key: str = "", chunk_bytes: int = 16384, chunk_delay: float = 0.0,
                 speech_seconds: float | None = None) -> None:
        self.transcript = transcript
        self.stt_delay, self.tts_delay = stt_delay, tts_delay
        self.key = key
        self.chunk_bytes, self.chunk_delay = chunk_bytes, chunk_delay
        self.speech_seconds = speech_seconds
        self.cond = threading.Condition()
        self.heard: list[Heard] = []
        self.failures: dict[str, list[tuple[int, str]]] = {}
        self._httpd: ThreadingHTTPServer | None = None

    # --- lifecycle --------------------------------------------------------------------------
    def start(self) -> SpeechServer:
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self._httpd.daemon_threads = True
        self._httpd.fake = self
        threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def __enter__(self) -> SpeechServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    # --- what a test does ----------------------------------------------------------------------
    def fail(self, kind: str, status: int, message: str = "", times: int = 1) -> None:
        """The next `times` requests of `kind` ("transcriptions" or "speech") answer `status`."""
        with self.cond:
            self.failures.setdefault(kind, []).extend([(status, message or f"error {status}")] * times)

    def of(self, kind: str) -> list[Heard]:
        with self.cond:
            return [h for h in self.heard if h.kind == kind]

    def wait_for(self, predicate: Callable[[], Any], timeout: float = 30) -> Any:
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                value = predicate()
                if value:
                    return value
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"fake speech server: condition not met in {timeout}s; heard "
                                         f"{[(h.kind, h.fields.get('input', '')[:30]) for h in self.heard][-10:]}")
                self.cond.wait(min(left, 0.2))

    def reset(self) -> None:
        with self.cond:
            self.heard.clear()
            self.failures.clear()

    # --- answers ------------------------------------------------------------------------------------
    def _record(self, heard: Heard) -> tuple[int, str] | None:
        with self.cond:
            self.heard.append(heard)
            self.cond.notify_all()
            queued = self.failures.get(heard.kind)
            return queued.pop(0) if queued else None

    def _done(self) -> None:
        with self.cond:
            self.cond.notify_all()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet
        pass

    @property
    def fake(self) -> SpeechServer:
        return self.server.fake

    def do_POST(self) -> None:
        arrived = time.monotonic()  # the request's head is read; its delay counts from here
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length)
        path = self.path.rstrip("/")
        kind = {"/v1/audio/transcriptions": "transcriptions", "/v1/audio/speech": "speech"}.get(path)
        if kind is None:
            self._json(404, {"detail": "Not Found"})
            return
        if kind == "speech":
            heard = Heard("speech", json.loads(body or b"{}"), arrived)
        else:
            fields, file = _multipart(self.headers.get("Content-Type", ""), body)
            heard = Heard("transcriptions", fields, arrived, file)
        heard.authorization = self.headers.get("Authorization", "")
        failure = self.fake._record(heard)
        if self.fake.key and heard.authorization != f"Bearer {self.fake.key}":
            self._json(401, {"error": {"message": "Incorrect API key provided", "type": "invalid_request_error"}})
            return
        if failure:
            self._json(failure[0], {"detail": failure[1]})
            return
        if kind == "transcriptions":
            time.sleep(max(0.0, heard.at + self.fake.stt_delay - time.monotonic()))
            transcript = self.fake.transcript
            text = transcript(heard) if callable(transcript) else transcript
            if heard.fields.get("response_format") == "text":
                self._send(200, text.encode(), "text/plain; charset=utf-8")
            else:
                self._json(200, {"text": text})
        else:
            self._speak(heard)
        heard.answered_at = time.monotonic()
        self.fake._done()

    def _speak(self, heard: Heard) -> None:
        fmt = heard.fields.get("response_format") or "mp3"
        if not heard.fields.get("input"):
            self._json(422, {"detail": "input is required"})
            return
        data = audio_for(heard.fields["input"], fmt, self.fake.speech_seconds)
        time.sleep(max(0.0, heard.at + self.fake.tts_delay - time.monotonic()))  # the delay counts from arrival
        try:
            self.send_response(200)
            self.send_header("Content-Type", CONTENT_TYPES.get(fmt, "application/octet-stream"))
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            step = self.fake.chunk_bytes
            for start in range(0, len(data), step):
                chunk = data[start:start + step]
                self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                self.wfile.flush()
                if not heard.first_byte_at:
                    heard.first_byte_at = time.monotonic()
                if self.fake.chunk_delay:
                    time.sleep(self.fake.chunk_delay)
            self.wfile.write(b"0\r\n\r\n")
        except OSError:
            pass

    def _json(self, status: int, payload: dict) -> None:
        self._send(status, json.dumps(payload).encode(), "application/json")

    def _send(self, status: int, data: bytes, ctype: str) -> None:
        try:
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except OSError:
            pass


def _multipart(ctype: str, body: bytes) -> tuple[dict, tuple[str, str, bytes] | None]:
    message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
        f"Content-Type: {ctype}\r\n\r\n".encode() + body)
    fields, file = {}, None
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        payload = part.get_payload(decode=True) or b""
        if part.get_filename() is not None:
            file = (part.get_filename(), part.get_content_type(), payload)
        else:
            fields[name] = payload.decode()
    return fields, file
