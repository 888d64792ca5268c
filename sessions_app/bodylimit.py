"""Request bodies are limited before they are read.

Two caps: `max_body_bytes(path)` for a signed-in request (per path: SESSION_IMPORT_MAX_MB for
`POST /sessions/import`, SESSION_FILES_MAX_SIZE_MB plus multipart overhead for a session's files,
VOICE_MAX_MB for a recording to transcribe,
DATA_UPLOAD_MAX_MEMORY_SIZE (JSON with images) elsewhere), and `anonymous_body_bytes()`
(ANONYMOUS_BODY_MAX_KB) for requests without valid credentials (413 over it; 401 naming the
problem when credentials were sent but are wrong).
So an anonymous client can make the server read a login form, never a 300 MB upload.

The rules live here; two places apply them before a body is buffered:
- `navi_project.serve` (daphne at the protocol level: Twisted would otherwise spool the whole
  body before the application runs), used by `make run` and the live tests;
- `BodyLimitMiddleware` (ASGI, in front of Django, which reads the whole body before any
  Django middleware runs), the guard under any other ASGI server such as uvicorn.
"""

from __future__ import annotations

import json
import re
from importlib import import_module
from urllib.parse import unquote, urlsplit

from asgiref.sync import sync_to_async
from django.conf import settings
from django.http.cookie import parse_cookie

from navi_project import metrics

Refusal = tuple[int, str]  # HTTP status, error message
MULTIPART_OVERHEAD = 64 * 1024  # headers and boundaries around the file in a multipart body
MB = 1024 * 1024
IMPORT_PATH = "/sessions/import"
KNOWLEDGE_PATH = "/knowledge"  # a document for the Knowledge page: KNOWLEDGE_MAX_FILE_MB
_UPLOAD_PATH = re.compile(r"^/sessions/[^/]+/files/?$")
_AUDIO_PATH = re.compile(r"^/sessions/[^/]+/audio/?$")  # a recording to transcribe: VOICE_MAX_MB


def request_path(raw: bytes | str | None) -> str | None:
    """The decoded path of a request target (`/a%20b?q=1` → `/a b`), as Django routes it."""
    if raw is None:
        return None
    text = raw.decode("latin-1") if isinstance(raw, bytes) else raw
    return unquote(urlsplit(text).path)


def max_body_bytes(path: str | None = None) -> int:
    """What a signed-in request to `path` may send: SESSION_IMPORT_MAX_MB for the import, the
    upload limit for a session's files, DATA_UPLOAD_MAX_MEMORY_SIZE elsewhere (None: the most
    any path takes)."""
    upload = settings.SESSION_FILES_MAX_SIZE_MB * MB + MULTIPART_OVERHEAD
    imports = settings.SESSION_IMPORT_MAX_MB * MB
    if path is None:
        return max(upload, imports, settings.KNOWLEDGE_MAX_FILE_MB * MB + MULTIPART_OVERHEAD,
                   settings.VOICE_MAX_MB * MB + MULTIPART_OVERHEAD, settings.DATA_UPLOAD_MAX_MEMORY_SIZE)
    if path.rstrip("/") == IMPORT_PATH:
        return imports
    if _UPLOAD_PATH.match(path):
        return upload
    if path.rstrip("/") == KNOWLEDGE_PATH:
        return settings.KNOWLEDGE_MAX_FILE_MB * MB + MULTIPART_OVERHEAD
    if _AUDIO_PATH.match(path):
        return settings.VOICE_MAX_MB * MB + MULTIPART_OVERHEAD
    return settings.DATA_UPLOAD_MAX_MEMORY_SIZE


def anonymous_body_bytes() -> int:
    return settings.ANONYMOUS_BODY_MAX_KB * 1024


def too_large(path: str | None = None) -> Refusal:
    if path is not None and path.rstrip("/") == IMPORT_PATH:
        return 413, (
            f"the export is larger than {settings.SESSION_IMPORT_MAX_MB} MB (SESSION_IMPORT_MAX_MB); "
            "raise SESSION_IMPORT_MAX_MB or import a shorter chat"
        )
    if path is not None and path.rstrip("/") == KNOWLEDGE_PATH:  # DESIGN §10: a 400 like its other refusals
        return 400, (
            f"the file is larger than KNOWLEDGE_MAX_FILE_MB ({settings.KNOWLEDGE_MAX_FILE_MB} MB); "
            "split it into smaller files"
        )
    if path is not None and _AUDIO_PATH.match(path):
        return 413, (
            f"the recording is larger than VOICE_MAX_MB ({settings.VOICE_MAX_MB} MB); "
            "send a shorter or compressed one (WebM/Opus or MP3)"
        )
    if path is None or _UPLOAD_PATH.match(path):
        return 413, (
            f"file is larger than SESSION_FILES_MAX_SIZE_MB ({settings.SESSION_FILES_MAX_SIZE_MB} MB); "
            "split or compress it"
        )
    return 413, (
        f"request body is larger than {settings.DATA_UPLOAD_MAX_MEMORY_SIZE // MB} MB "
        "(DATA_UPLOAD_MAX_MEMORY_SIZE); send less at once"
    )


def anonymous_too_large() -> Refusal:
    """A body over the anonymous cap from a client that sent no credentials at all."""
    return 413, (
        f"request body over {settings.ANONYMOUS_BODY_MAX_KB} KB without credentials: "
        f"log in at {settings.LOGIN_URL} or send 'Authorization: Bearer <token>' to send more"
    )


def unauthenticated() -> Refusal:
    """Kept for callers that only know the credentials were not accepted."""
    return 401, f"authentication required: log in at {settings.LOGIN_URL} or send 'Authorization: Bearer <token>'"


def bad_token() -> Refusal:
    return 401, (
        "invalid API token: create one with `python manage.py navi_token <username>` or on "
        "/settings, and send it as 'Authorization: Bearer <token>'"
    )


def malformed_authorization() -> Refusal:
    return 401, "malformed Authorization header: send 'Authorization: Bearer <token>'"


def expired_login() -> Refusal:
    return 401, f"your login session is invalid or has expired: log in again at {settings.LOGIN_URL}"


def first_look(length: int | None, credentials_sent: bool, path: str | None = None) -> tuple[Refusal | None, int | None]:
    """What the headers alone decide. `length` is the Content-Length (None: chunked).

    (refusal, None): answer now. (None, limit): read at most `limit` bytes. (None, None): the
    credentials must be checked (`check_credentials`) before any more of the body is read.
    """
    if length is not None and length > max_body_bytes(path):
        return too_large(path), None
    if length is not None and length <= anonymous_body_bytes():
        return None, anonymous_body_bytes()
    if not credentials_sent:
        return (anonymous_too_large(), None) if length is not None else (None, anonymous_body_bytes())
    return None, None


def credentials(cookie_header: str | None, authorization: str | None) -> tuple[str | None, str | None]:
    """(session key, Authorization header) a request carries; both None for an anonymous one."""
    session_key = parse_cookie(cookie_header or "").get(settings.SESSION_COOKIE_NAME) or None
    if metrics.is_metrics_token(authorization):  # a scraper, not an account: the anonymous body limit
        authorization = None
    return session_key, authorization or None


def authenticated(session_key: str | None, authorization: str | None) -> bool:
    """Do these credentials belong to an active user? Uses the ORM: call it off the event loop."""
    return check_credentials(session_key, authorization) is None


def check_credentials(session_key: str | None, authorization: str | None) -> Refusal | None:
    """None when these credentials belong to an active user, else the 401 that says what is
    wrong with them. The Authorization header, when present, decides (as in
    BearerTokenMiddleware). Uses the ORM: call it off the event loop."""
    from django.contrib.auth import get_user
    from django.db import connections
    from django.http import HttpRequest

    # Not at the top: navi_project.serve imports this module before Django's apps are ready.
    from sessions_app.auth import _bearer, user_for_token

    try:
        if authorization is not None:
            raw = _bearer(authorization)
            if raw is None:
                return malformed_authorization()
            return None if user_for_token(raw) is not None else bad_token()
        if session_key is None:
            return unauthenticated()
        request = HttpRequest()
        request.session = import_module(settings.SESSION_ENGINE).SessionStore(session_key)
        return None if get_user(request).is_authenticated else expired_login()
    finally:
        connections.close_all()  # this runs in a pool thread: leave no connection behind


def json_body(refusal: Refusal) -> bytes:
    return json.dumps({"error": refusal[1]}).encode()


def _headers(scope: dict) -> dict[bytes, str]:
    return {name.lower(): value.decode("latin-1") for name, value in scope.get("headers") or []}


def _content_length(headers: dict[bytes, str]) -> int | None:
    """The declared length; 0 for a request with no body at all (neither Content-Length nor
    Transfer-Encoding, e.g. a GET), None for a chunked body."""
    value = headers.get(b"content-length", "").strip()
    if value.isdigit():
        return int(value)
    return None if b"transfer-encoding" in headers else 0


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
        path = scope.get("path")
        refusal, limit = first_look(_content_length(headers), any(creds), path)
        if refusal is None and limit is None:
            refusal = await sync_to_async(check_credentials, thread_sensitive=False)(*creds)
            limit = max_body_bytes(path)
        if refusal is not None:
            return await _respond(send, refusal)
        over = too_large(path) if limit > anonymous_body_bytes() else anonymous_too_large()
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

