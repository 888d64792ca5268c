"""Authentication for scripts: `Authorization: Bearer <token>` on REST and WebSocket.

Browsers use Django's session cookie; both paths end in `request.user` / `scope["user"]`.
"""

from __future__ import annotations

import functools
from datetime import timedelta
from typing import Any, Callable

from channels.auth import AuthMiddlewareStack
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AnonymousUser
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils import timezone

from navi_project import hotsql
from navi_project.hop import db_hop

from .models import ApiToken, hash_token


def _bearer(value: str | None) -> str | None:
    if not value:
        return None
    scheme, _, token = value.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


# "Last used" is kept to the minute: a script's every request and socket wrote it (a write and a
# commit on each connect, ~0.2 ms of the database thread), now the first use in each minute does.
LAST_USED_PRECISION = timedelta(minutes=1)


def user_for_token(raw: str):
    """The active user a raw token belongs to, or None."""
    # Every script request and socket comes through here: hot-path SQL (navi_project.hotsql).
    tokens = hotsql.select(ApiToken, "token_hash = %s", [hash_token(raw)])
    if not tokens:
        return None
    User = get_user_model()
    users = hotsql.select(User, "id = %s AND is_active = %s", [tokens[0].user_id, True])
    if not users:
        return None
    now = timezone.now()
    last = tokens[0].last_used
    if last is None or not (now - LAST_USED_PRECISION < last <= now):
        hotsql.execute(
            f"UPDATE {hotsql.table(ApiToken)} SET last_used = %s WHERE id = %s",
            [hotsql.prep(ApiToken, "last_used", now), tokens[0].pk],
        )
    return users[0]


class BearerTokenMiddleware:
    """Authenticate `Authorization: Bearer` requests.

    Token requests skip CSRF: the token is not sent automatically by browsers, so a forged
    cross-site request cannot carry it. A bad token is a 401, never a silent anonymous request.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        header = request.headers.get("Authorization")
        raw = _bearer(header)
        if header and raw is None:
            return JsonResponse({"error": "malformed Authorization header: send 'Authorization: Bearer <token>'"}, status=401)
        if raw is not None:
            user = user_for_token(raw)
            if user is None:
                return JsonResponse(
                    {"error": "invalid API token: create one with `python manage.py navi_token <username>` or on "
                     "/settings, and send it as 'Authorization: Bearer <token>'"},
                    status=401,
                )
            request.user = user
            request._dont_enforce_csrf_checks = True
            request.navi_token_auth = True
        return self.get_response(request)


def how_to_authenticate() -> str:
    """What a 401 answer tells the client to do."""
    return f"log in at {settings.LOGIN_URL} or send 'Authorization: Bearer <token>'"


def unauthenticated_response() -> JsonResponse:
    return JsonResponse({"error": f"authentication required: {how_to_authenticate()}"}, status=401)


def api_login_required(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """Like login_required, but answers 401 JSON instead of redirecting to the login page."""

    @functools.wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not request.user.is_authenticated:
            return unauthenticated_response()
        return view(request, *args, **kwargs)

    return wrapper


class WebSocketTokenAuthMiddleware:
    """Channels middleware: a Bearer header in the handshake decides the user alone (a bad
    token is anonymous, whatever cookie comes with it), so a script's socket costs one lookup;
    without one, the session cookie decides, through Channels' own stack."""

    def __init__(self, inner):
        self.inner = inner
        self.by_cookie = AuthMiddlewareStack(inner)

    async def __call__(self, scope, receive, send):
        headers = dict(scope.get("headers") or [])
        raw = _bearer(headers.get(b"authorization", b"").decode("latin-1") or None)
        if raw is None:
            return await self.by_cookie(scope, receive, send)
        user = await db_hop(user_for_token, raw)
        scope = dict(scope, user=user or AnonymousUser(), navi_token_auth=user is not None)
        return await self.inner(scope, receive, send)


def WebSocketAuthStack(inner):  # noqa: N802 - named like Channels' AuthMiddlewareStack
    """Bearer token auth, else cookie session auth."""
    return WebSocketTokenAuthMiddleware(inner)
