"""Request bodies are limited before they are read.

Two caps: `max_body_bytes()` for any request (the upload limit SESSION_FILES_MAX_SIZE_MB plus
multipart overhead, or DATA_UPLOAD_MAX_MEMORY_SIZE for JSON with images, whichever is larger),
and `anonymous_body_bytes()` (ANONYMOUS_BODY_MAX_KB) for requests without valid credentials.
So an anonymous client can make the server read a login form, never a 300 MB upload.

The rules live here; two places apply them before a body is buffered:
- `navi_project.serve` (daphne at the protocol level: Twisted would otherwise spool the whole
  body before the application runs), used by `make run` and the live tests;
- `BodyLimitMiddleware` (ASGI, in front of Django, which reads the whole body before any
  Django middleware runs), the guard under any other ASGI server such as uvicorn.
"""

from __future__ import annotations

import json
from importlib import import_module

from asgiref.sync import sync_to_async
from django.conf import settings
from django.http.cookie import parse_cookie

from navi_project import metrics

Refusal = tuple[int, str]  # HTTP status, error message
MULTIPART_OVERHEAD = 64 * 1024  # headers and boundaries around the file in a multipart body


def max_body_bytes() -> int:
    upload = settings.SESSION_FILES_MAX_SIZE_MB * 1024 * 1024 + MULTIPART_OVERHEAD
    return max(upload, settings.DATA_UPLOAD_MAX_MEMORY_SIZE)


def anonymous_body_bytes() -> int:
    return settings.ANONYMOUS_BODY_MAX_KB * 1024


def too_large() -> Refusal:
    return 413, (
        f"request body is larger than the server accepts ({max_body_bytes() // (1024 * 1024)} MB; "
        "SESSION_FILES_MAX_SIZE_MB); split or compress the file"
    )


def unauthenticated() -> Refusal:
    return 401, (
        f"authentication required for a request body over {settings.ANONYMOUS_BODY_MAX_KB} KB: "
        f"log in at {settings.LOGIN_URL} or send 'Authorization: Bearer <token>'"
    )


def first_look(length: int | None, credentials_sent: bool) -> tuple[Refusal | None, int | None]:
    """What the headers alone decide. `length` is the Content-Length (None: chunked).

    (refusal, None): answer now. (None, limit): read at most `limit` bytes. (None, None): the
    credentials must be checked (`authenticated`) before any more of the body is read.
    """
    if length is not None and length > max_body_bytes():
        return too_large(), None
    if length is not None and length <= anonymous_body_bytes():
        return None, anonymous_body_bytes()
    if not credentials_sent:
        return (unauthenticated(), None) if length is not None else (None, anonymous_body_bytes())
    return None, None


def credentials(cookie_header: str | None, authorization: str | None) -> tuple[str | None, str | None]:
    """(session key, Authorization header) a request carries; both None for an anonymous one."""
    session_key = parse_cookie(cookie_header or "").get(settings.SESSION_COOKIE_NAME) or None
    if metrics.is_metrics_token(authorization):  # a scraper, not an account: the anonymous body limit
        authorization = None
    return session_key, authorization or None


def authenticated(session_key: str | None, authorization: str | None) -> bool:
    """Do these credentials belong to an active user? The Authorization header, when present,
    decides (as in BearerTokenMiddleware). Uses the ORM: call it off the event loop."""
    from django.contrib.auth import get_user
    from django.db import connections
    from django.http import HttpRequest

    # Not at the top: navi_project.serve imports this module before Django's apps are ready.
    from sessions_app.auth import _bearer, user_for_token

    try:
        if authorization is not None:
            raw = _bearer(authorization)
            return raw is not None and user_for_token(raw) is not None
        if session_key is None:
            return False
        request = HttpRequest()
        request.session = import_module(settings.SESSION_ENGINE).SessionStore(session_key)
        return get_user(request).is_authenticated
    finally:
        connections.close_all()  # this runs in a pool thread: leave no connection behind


def json_body(refusal: Refusal) -> bytes:
    return json.dumps({"error": refusal[1]}).encode()


def _headers(scope: dict) -> dict[bytes, str]:
    return {name.lower(): value.decode("latin-1") for name, value in scope.get("headers") or []}


def _content_length(headers: dict[bytes, str]) -> int | None:
    value = headers.get(b"content-length", "").strip()
    return int(value) if value.isdigit() else None


class BodyLimitMiddleware:
    """ASGI: refuse by Content-Length before the application reads the body, and stop a body
    without one (chunked) at the cap, answering 413/401 with a JSON error."""

    def __init__(self, application):
        self.application = application

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.application(scope, receive, send)
        headers = _headers(scope)
        creds = credentials(headers.get(b"cookie"), headers.get(b"authorization"))
        refusal, limit = first_look(_content_length(headers), any(creds))
        if refusal is None and limit is None:
            ok = await sync_to_async(authenticated, thread_sensitive=False)(*creds)
            refusal, limit = (None, max_body_bytes()) if ok else (unauthenticated(), None)
        if refusal is not None:
            return await _respond(send, refusal)
        over = too_large() if limit > anonymous_body_bytes() else unauthenticated()
        return await self.application(scope, _limited(receive, send, limit, over), send)


async def _respond(send, refusal: Refusal) -> None:
    body = json_body(refusal)
    await send(
        {
            "type": "http.response.start",
            "status": refusal[0],
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                        (b"connection", b"close")],
        }
    )
    await send({"type": "http.response.body", "body": body})


def _limited(receive, send, limit: int, refusal: Refusal):
    """A `receive` that answers `refusal` and reports a disconnect (the application then stops
    reading) once the body passes `limit` bytes."""
    received = 0

    async def limited_receive():
        nonlocal received
        message = await receive()
        if message["type"] == "http.request":
            received += len(message.get("body", b""))
            if received > limit:
                await _respond(send, refusal)
                return {"type": "http.disconnect"}
        return message

    return limited_receive

