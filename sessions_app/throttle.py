"""Login throttling: LOGIN_MAX_FAILURES failed logins per username + client IP within
LOGIN_FAILURE_WINDOW_MINUTES, then 429 with Retry-After until the oldest one ages out.

Attempts are rows in the database (not a per-process cache), so several worker processes
share one count. A row is written *before* the password is checked and removed on success:
parallel guesses each see the others' rows, so a burst cannot slip past the limit.
"""

from __future__ import annotations

import functools
import math
import unicodedata
from datetime import timedelta
from typing import Any, Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.utils import timezone

from .models import LoginAttempt


def _window() -> timedelta:
    return timedelta(minutes=settings.LOGIN_FAILURE_WINDOW_MINUTES)


def throttle_username(raw: object) -> str:
    """The name a login is counted under: NFKC-normalised as Django's login form and
    `normalize_username` do, stripped as the form field does, then case-folded. So 'Owner',
    ' owner ' and the fullwidth 'ｏｗｎｅｒ' (all of which Django may resolve to one account) share
    one count."""
    name = unicodedata.normalize("NFKC", str(raw)).strip().casefold()
    return unicodedata.normalize("NFKC", name)[:150]


def _attempt_key(request: HttpRequest) -> tuple[str, str]:
    """(username, ip) of a login POST."""
    return throttle_username(request.POST.get("username", "")), request.META.get("REMOTE_ADDR", "")[:64]


def _lockout_seconds(attempt: LoginAttempt) -> int | None:
    """Seconds until one more attempt is allowed, if the attempts made before this one already
    fill the window; None if this one may go ahead. Earlier = lower id, so concurrent attempts
    are ordered too."""
    now = timezone.now()
    earlier = LoginAttempt.objects.filter(
        username=attempt.username, ip=attempt.ip, at__gt=now - _window(), pk__lt=attempt.pk
    ).order_by("-pk")
    times = list(earlier.values_list("at", flat=True)[: settings.LOGIN_MAX_FAILURES])
    if len(times) < settings.LOGIN_MAX_FAILURES:
        return None
    return max(1, math.ceil((times[-1] + _window() - now).total_seconds()))


def _too_many(request: HttpRequest, seconds: int) -> HttpResponse:
    minutes = math.ceil(seconds / 60)
    response = TemplateResponse(
        request, "registration/login.html", {"throttled_minutes": minutes, "next": request.POST.get("next", "/")}, status=429
    )
    response["Retry-After"] = str(seconds)
    return response


def login_throttled(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """Wrap a login view (ours, the admin's): count its POSTs and refuse once over the limit."""

    @functools.wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if request.method != "POST":
            return view(request, *args, **kwargs)
        username, ip = _attempt_key(request)
        LoginAttempt.objects.filter(at__lte=timezone.now() - _window()).delete()
        attempt = LoginAttempt.objects.create(username=username, ip=ip)
        wait = _lockout_seconds(attempt)
        if wait is not None:
            attempt.delete()  # a refused attempt is not a failure: it does not extend the lock
            return _too_many(request, wait)
        response = view(request, *args, **kwargs)
        if request.user.is_authenticated and throttle_username(request.user.get_username()) == username:
            LoginAttempt.objects.filter(username=username, ip=ip).delete()
        return response

    return wrapper

