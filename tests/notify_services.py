"""Local stand-ins for the services notifications go to, on 127.0.0.1 (a port the OS picks):

- PushService: a Web Push service as a browser's vendor runs it. It checks the VAPID
  `Authorization: vapid t=<JWT>, k=<key>` header (signature, audience, expiry, subject, and the
  key the subscription was made with), decrypts the aes128gcm body with the subscriber's private
  key (http_ece, as a browser does) and keeps the payloads. `gone` endpoints answer 410.
- Receiver: an HTTP endpoint for Apprise's json:// scheme that keeps each message, or answers
  `status` (500) to test failures.
"""

from __future__ import annotations

import base64
import json
import os
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import http_ece
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from py_vapid import Vapid02


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _unb64(value: str) -> bytes:
    return base64.urlsafe_b64decode(value + "=" * (-len(value) % 4))


@dataclass
class Subscriber:
    """A browser's side of a subscription: its ECDH key pair and auth secret."""

    endpoint: str
    private_key: ec.EllipticCurvePrivateKey = field(default_factory=lambda: ec.generate_private_key(ec.SECP256R1()))
    auth: bytes = field(default_factory=lambda: os.urandom(16))
    vapid_key: str = ""  # the applicationServerKey it subscribed with

    def subscription(self) -> dict:
        point = self.private_key.public_key().public_bytes(
            serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint
        )
        return {"endpoint": self.endpoint, "expirationTime": None, "keys": {"p256dh": b64url(point), "auth": b64url(self.auth)}}


class _Server(ThreadingHTTPServer):
    daemon_threads = True


class _Service:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.received: list = []
        self.rejected: list[str] = []
        self._httpd = _Server(("127.0.0.1", 0), self._handler())
        self.port = self._httpd.server_address[1]
        self.origin = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def _handler(self):
        service = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                status = service.handle(self.path, dict(self.headers), body)
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        return Handler

    def handle(self, path: str, headers: dict, body: bytes) -> int:
        raise NotImplementedError


class PushService(_Service):
    def __init__(self) -> None:
        super().__init__()
        self.subscribers: dict[str, Subscriber] = {}
        self.gone: set[str] = set()

    def subscribe(self, vapid_public_key: str) -> Subscriber:
        path = f"/push/{b64url(os.urandom(12))}"
        sub = Subscriber(endpoint=self.origin + path, vapid_key=vapid_public_key)
        self.subscribers[path] = sub
        return sub

    def handle(self, path: str, headers: dict, body: bytes) -> int:
        sub = self.subscribers.get(path)
        if sub is None or path in self.gone:
            return 410
        problem = self._vapid_problem(headers.get("Authorization", ""), sub)
        if problem:
            with self.lock:
                self.rejected.append(problem)
            return 403
        if headers.get("Content-Encoding") != "aes128gcm" or not headers.get("TTL"):
            return 400
        plain = http_ece.decrypt(body, private_key=sub.private_key, auth_secret=sub.auth, version="aes128gcm")
        with self.lock:
            self.received.append({"path": path, "headers": headers, "payload": json.loads(plain)})
        return 201

    def _vapid_problem(self, auth: str, sub: Subscriber) -> str:
        """Why the Authorization header is refused ("" = valid), as a push service checks it."""
        scheme, _, params = auth.partition(" ")
        parts = dict(p.strip().split("=", 1) for p in params.split(",") if "=" in p)
        if scheme.lower() != "vapid" or "t" not in parts or "k" not in parts:
            return "not a vapid t=, k= header"
        if parts["k"] != sub.vapid_key:
            return "signed with another key than the subscription's"
        if not Vapid02.verify(auth):
            return "bad signature"
        claims = json.loads(_unb64(parts["t"].split(".")[1]))
        if claims.get("aud") != self.origin:
            return f"audience {claims.get('aud')!r}"
        if not time.time() < claims.get("exp", 0) <= time.time() + 24 * 3600:
            return "expiry out of range"
        if not str(claims.get("sub", "")).startswith(("mailto:", "https:")):
            return "no subject"
        return ""


class Receiver(_Service):
    """Apprise's json:// target: POST {version, title, message, type}."""

    def __init__(self, status: int = 200) -> None:
        super().__init__()
        self.status = status

    def handle(self, path: str, headers: dict, body: bytes) -> int:
        with self.lock:
            self.received.append({"path": path, "json": json.loads(body or b"{}")})
        return self.status
