"""Project-level views: health check and JSON error handlers."""

from __future__ import annotations

import asyncio

import httpx
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.conf import settings
from django.db import connection
from django.http import HttpRequest, JsonResponse
from django.views.decorators.http import require_GET


def _check_db() -> str:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        return "ok"
    except Exception as exc:  # report, don't crash: this is what /health is for
        return f"error: {exc}"


def _check_channel_layer() -> str:
    layer = get_channel_layer()
    if layer is None:
        return "error: no channel layer configured"

    async def roundtrip() -> None:
        channel = await layer.new_channel()
        await layer.send(channel, {"type": "health.ping"})
        await asyncio.wait_for(layer.receive(channel), timeout=2)

    try:
        async_to_sync(roundtrip)()
        return "ok"
    except Exception as exc:
        return f"error: {type(exc).__name__}: {exc}"


def _check_llm() -> str:
    try:
        httpx.get(f"{settings.OLLAMA_HOST.rstrip('/')}/api/version", timeout=1.5).raise_for_status()
        return "ok"
    except Exception:
        return f"unreachable at {settings.OLLAMA_HOST} — is `ollama serve` running?"


@require_GET
def health(request: HttpRequest) -> JsonResponse:
    """Liveness plus dependencies. Public (no login) so monitors can use it; reveals no data."""
    return JsonResponse(
        {
            "status": "ok",
            "db": _check_db(),
            "channel_layer": _check_channel_layer(),
            "llm": _check_llm(),
        }
    )


def csrf_failure(request: HttpRequest, reason: str = "") -> JsonResponse:
    return JsonResponse(
        {"error": f"CSRF check failed ({reason}); reload the page, or use a Bearer token from a script"},
        status=403,
    )


def not_found(request: HttpRequest, exception: Exception | None = None) -> JsonResponse:
    return JsonResponse({"error": f"nothing at {request.path}"}, status=404)
