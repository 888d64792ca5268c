"""Project-level views: health check and JSON error handlers."""

from __future__ import annotations

import asyncio
import time

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
    """"ok", or what is wrong with an LLM backend that a profile uses (agent.health)."""
    from agent.health import llm_health

    return llm_health()["summary"]


LLM_PROBE_TTL_S = 10.0
_llm_probe_cache: dict[str, tuple[float, str]] = {}


def _cached(key: str, probe) -> str:
    """The probe's answer, reused for LLM_PROBE_TTL_S: /health is public, and a flood of it
    must not become a flood of requests to the LLM server."""
    now = time.monotonic()
    hit = _llm_probe_cache.get(key)
    if hit is not None and now - hit[0] < LLM_PROBE_TTL_S:
        return hit[1]
    answer = probe()
    _llm_probe_cache[key] = (now, answer)
    return answer


@require_GET
def health(request: HttpRequest) -> JsonResponse:
    """Liveness for everyone (monitors need no login): `ok`, or `degraded` when an LLM backend a
    profile uses cannot be reached. Which dependency is down, and where, only for signed-in users."""
    llm = _cached(f"llm:{settings.OLLAMA_HOST}:{settings.OPENAI_BASE_URL}", _check_llm)
    report = {
        "status": "ok" if llm == "ok" else "degraded",
        "db": _check_db(),
        "channel_layer": _check_channel_layer(),
        "llm": llm,
    }
    if not request.user.is_authenticated:
        report = {"status": report["status"]}
    return JsonResponse(report)


def csrf_failure(request: HttpRequest, reason: str = "") -> JsonResponse:
    return JsonResponse(
        {"error": f"CSRF check failed ({reason}); reload the page, or use a Bearer token from a script"},
        status=403,
    )


def not_found(request: HttpRequest, exception: Exception | None = None) -> JsonResponse:
    return JsonResponse({"error": f"nothing at {request.path}"}, status=404)
