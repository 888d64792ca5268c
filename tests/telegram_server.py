"""A fake Telegram Bot API server for tests: real HTTP on 127.0.0.1, the paths of the official
server (`/bot<token>/<method>`, `/file/bot<token>/<path>`), so python-telegram-bot runs unmodified
against it through its base-URL option.

It serves getMe, setWebhook/deleteWebhook, getUpdates (a long poll that waits up to `timeout`), sendMessage,
editMessageText, answerCallbackQuery, sendPhoto/sendDocument/sendVoice (multipart), getFile and file
downloads. A test pushes updates (`push_text`, `push_callback`, ...), fails the next calls of a
method (`fail(method, status, retry_after=...)`), revokes the token (`revoked = True`) and
waits on what the bot did (`wait_for`) instead of sleeping.
"""

from __future__ import annotations

import asyncio
import email.parser
import email.policy
import itertools
import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable
from urllib.parse import parse_qsl

BOT_ID = 777000
BOT_USERNAME = "navi_test_bot"


@dataclass
class Call:
    method: str
    params: dict
    at: float  # time.monotonic() when it arrived
    files: dict = field(default_factory=dict)  # field name -> (filename, bytes)


@dataclass
class Sent:
    """A message the bot sent, with the text of each version (the first, then every edit)."""

    message_id: int
    chat_id: int
    texts: list[str]
    times: list[float]
    reply_markup: Any = None
    kind: str = "text"  # text, photo, document, voice
    file: tuple[str, bytes] | None = None

    @property
    def text(self) -> str:
        return self.texts[-1]

    @property
    def buttons(self) -> list[dict]:
        markup = self.reply_markup or {}
        return [b for row in markup.get("inline_keyboard", []) for b in row]


class FakeTelegram:
    def __init__(self, token: str = "123456:TEST-token") -> None:
        self.token = token
        self.revoked = False
        self.cond = threading.Condition()
        self.updates: list[dict] = []
        self.calls: list[Call] = []
        self.sent: dict[int, Sent] = {}
        self.files: dict[str, tuple[str, bytes]] = {}  # file_id -> (file_path, bytes)
        self.failures: dict[str, list[tuple[int, dict]]] = {}
        self._update_ids = itertools.count(1)
        self._message_ids = itertools.count(1)
        self._callback_ids = itertools.count(1)
        self._httpd: ThreadingHTTPServer | None = None

    # --- lifecycle -------------------------------------------------------------------------
    def start(self) -> FakeTelegram:
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self._httpd.daemon_threads = True
        self._httpd.fake = self
        threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            with self.cond:
                self.cond.notify_all()
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    # --- what a test does -----------------------------------------------------------------------
    def push(self, update: dict) -> int:
        with self.cond:
            update_id = next(self._update_ids)
            self.updates.append({"update_id": update_id, **update})
            self.cond.notify_all()
            return update_id

    def push_text(self, user_id: int, text: str, *, chat_id: int | None = None, chat_type: str = "private",
                  username: str = "", **extra: Any) -> int:
        return self.push({"message": self.message(user_id, text, chat_id=chat_id, chat_type=chat_type,
                                                  username=username, **extra)})

    def push_callback(self, user_id: int, data: str, message_id: int, chat_id: int | None = None) -> int:
        chat = chat_id if chat_id is not None else user_id
        message = {"message_id": message_id, "date": int(time.time()), "chat": {"id": chat, "type": "private"},
                   "text": "…"}
        return self.push({"callback_query": {"id": str(next(self._callback_ids)), "chat_instance": "ci",
                                             "from": _user(user_id), "data": data, "message": message}})

    def add_file(self, data: bytes, path: str) -> str:
        file_id = f"file-{len(self.files) + 1}"
        self.files[file_id] = (path, data)
        return file_id

    def message(self, user_id: int, text: str = "", *, chat_id: int | None = None, chat_type: str = "private",
                username: str = "", **extra: Any) -> dict:
        chat = {"id": chat_id if chat_id is not None else user_id, "type": chat_type}
        if chat_type != "private":
            chat["title"] = "A group"
        body = {"message_id": next(self._message_ids) + 100_000, "date": int(time.time()), "chat": chat,
                "from": _user(user_id, username)}
        if text:
            body["caption" if ("photo" in extra or "document" in extra or "voice" in extra) else "text"] = text
        return {**body, **extra}

    def fail(self, method: str, status: int, *, times: int = 1, retry_after: int | None = None,
             description: str = "") -> None:
        """The next `times` calls of `method` answer `status` (429 with `retry_after`)."""
        body: dict = {"ok": False, "error_code": status, "description": description or f"error {status}"}
        if retry_after is not None:
            body["parameters"] = {"retry_after": retry_after}
            body["description"] = f"Too Many Requests: retry after {retry_after}"
        with self.cond:
            self.failures.setdefault(method, []).extend([(status, body)] * times)

    def calls_of(self, method: str) -> list[Call]:
        with self.cond:
            return [c for c in self.calls if c.method == method]

    def messages_to(self, chat_id: int) -> list[Sent]:
        with self.cond:
            return [m for m in self.sent.values() if m.chat_id == chat_id]

    def wait_for(self, predicate: Callable[[], Any], timeout: float = 15) -> Any:
        """Wait until `predicate()` is truthy (re-checked after every call the bot makes)."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                value = predicate()
                if value:
                    return value
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"fake Telegram: condition not met in {timeout}s; calls: "
                                         f"{[c.method for c in self.calls][-20:]}")
                self.cond.wait(min(left, 0.2))

    async def until(self, predicate: Callable[[], Any], timeout: float = 15) -> Any:
        """`wait_for` from async code, without blocking the event loop the bot runs on."""
        return await asyncio.to_thread(self.wait_for, predicate, timeout)

    def confirmed(self) -> int:
        """The highest offset a getUpdates asked for (Telegram forgets updates below it)."""
        offsets = [int(c.params.get("offset") or 0) for c in self.calls_of("getUpdates")]
        return max(offsets, default=0)

    # --- the API ----------------------------------------------------------------------------------
    def answer(self, method: str, params: dict, files: dict) -> tuple[int, dict]:
        with self.cond:
            self.calls.append(Call(method, params, time.monotonic(), files))
            self.cond.notify_all()
            if self.revoked:
                return 401, {"ok": False, "error_code": 401, "description": "Unauthorized"}
            queued = self.failures.get(method)
            if queued:
                return queued.pop(0)
        if method == "getUpdates":
            return 200, {"ok": True, "result": self._get_updates(params)}
        handler = getattr(self, f"_{method}", None)
        if handler is None:
            return 404, {"ok": False, "error_code": 404, "description": "Not Found: method not found"}
        with self.cond:
            result = handler(params, files)
            self.cond.notify_all()
        return 200, {"ok": True, "result": result}

    def _get_updates(self, params: dict) -> list[dict]:
        offset = int(params.get("offset") or 0)
        deadline = time.monotonic() + float(params.get("timeout") or 0)
        with self.cond:
            while True:
                self.updates = [u for u in self.updates if u["update_id"] >= offset]
                if self.updates or time.monotonic() >= deadline or self._httpd is None:
                    return list(self.updates)
                self.cond.wait(min(deadline - time.monotonic(), 0.1))

    def _getMe(self, params: dict, files: dict) -> dict:
        return {"id": BOT_ID, "is_bot": True, "first_name": "Navi", "username": BOT_USERNAME}

    def _new(self, chat_id: int, text: str, markup: Any, kind: str = "text", file=None) -> dict:
        message_id = next(self._message_ids)
        now = time.monotonic()
        self.sent[message_id] = Sent(message_id, chat_id, [text], [now], markup, kind, file)
        return {"message_id": message_id, "date": int(time.time()), "chat": {"id": chat_id, "type": "private"},
                "text": text}

    def _sendMessage(self, params: dict, files: dict) -> dict:
        return self._new(int(params["chat_id"]), params["text"], _json(params.get("reply_markup")))

    def _editMessageText(self, params: dict, files: dict) -> dict:
        sent = self.sent[int(params["message_id"])]
        sent.texts.append(params["text"])
        sent.times.append(time.monotonic())
        sent.reply_markup = _json(params.get("reply_markup"))
        return {"message_id": sent.message_id, "date": int(time.time()),
                "chat": {"id": sent.chat_id, "type": "private"}, "text": params["text"]}

    def _answerCallbackQuery(self, params: dict, files: dict) -> bool:
        return True

    def _setWebhook(self, params: dict, files: dict) -> bool:
        return True

    def _deleteWebhook(self, params: dict, files: dict) -> bool:
        return True

    def _sendPhoto(self, params: dict, files: dict) -> dict:
        result = self._new(int(params["chat_id"]), params.get("caption", ""), None, "photo", files.get("photo"))
        result["photo"] = [{"file_id": "sent-photo", "file_unique_id": "u", "width": 1, "height": 1}]
        return result

    def _sendDocument(self, params: dict, files: dict) -> dict:
        result = self._new(int(params["chat_id"]), params.get("caption", ""), None, "document", files.get("document"))
        result["document"] = {"file_id": "sent-doc", "file_unique_id": "u"}
        return result

    def _sendVoice(self, params: dict, files: dict) -> dict:
        result = self._new(int(params["chat_id"]), params.get("caption", ""), None, "voice", files.get("voice"))
        result["voice"] = {"file_id": "sent-voice", "file_unique_id": "u", "duration": 1}
        return result

    def _getFile(self, params: dict, files: dict) -> dict:
        path, data = self.files[params["file_id"]]
        return {"file_id": params["file_id"], "file_unique_id": "u", "file_size": len(data), "file_path": path}

    def download(self, path: str) -> bytes | None:
        with self.cond:
            for file_path, data in self.files.values():
                if file_path == path:
                    return data
        return None


def _user(user_id: int, username: str = "") -> dict:
    return {"id": user_id, "is_bot": False, "first_name": f"User{user_id}", "username": username or f"user{user_id}"}


def _json(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet
        pass

    @property
    def fake(self) -> FakeTelegram:
        return self.server.fake

    def do_GET(self) -> None:
        prefix = f"/file/bot{self.fake.token}/"
        data = self.fake.download(self.path[len(prefix):]) if self.path.startswith(prefix) else None
        if data is None:
            self._send(404, b'{"ok":false,"error_code":404,"description":"Not Found"}')
            return
        self._send(200, data, "application/octet-stream")

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length)
        prefix = f"/bot{self.fake.token}/"
        if not self.path.startswith(prefix):
            self._send(404, b'{"ok":false,"error_code":404,"description":"Not Found"}')
            return
        params, files = _parse(self.headers.get("Content-Type", ""), body)
        status, answer = self.fake.answer(self.path[len(prefix):], params, files)
        self._send(status, json.dumps(answer).encode())

    def _send(self, status: int, data: bytes, ctype: str = "application/json") -> None:
        try:
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except OSError:
            pass


def _parse(ctype: str, body: bytes) -> tuple[dict, dict]:
    """Form fields (JSON-encoded values are left as text, as Telegram reads them) and files."""
    if ctype.startswith("multipart/form-data"):
        message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
            f"Content-Type: {ctype}\r\n\r\n".encode() + body)
        params, files = {}, {}
        for part in message.iter_parts():
            name = part.get_param("name", header="content-disposition")
            filename = part.get_filename()
            payload = part.get_payload(decode=True) or b""
            if filename is not None:
                files[name] = (filename, payload)
            else:
                params[name] = payload.decode()
        return params, files
    if ctype.startswith("application/json"):
        return (json.loads(body) if body else {}), {}
    return dict(parse_qsl(body.decode())), {}
