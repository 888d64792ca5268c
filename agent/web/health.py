"""/health: the database, the channel layer and LLM reachability (the backends the profiles
actually use, each probed once and the answer cached for a few seconds)."""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

import httpx
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.conf import settings
from django.db import connection
from django.http import HttpRequest, JsonResponse
from django.views.decorators.http import require_GET

from agent.llm import LLMBackend
from agent.models import Profile
from agent.registry import get_agent
from navi_project import connections
from tools_app.mcp import service as mcp_service

PROBE_TIMEOUT_S = 1.5
# Checks that apps above agent add from their AppConfig.ready (e.g. messaging_app's "telegram"):
# name -> function returning "ok", the problem, or None when the part is switched off.
EXTRA_CHECKS: dict[str, Callable[[], str | None]] = {}


def register_check(name: str, check: Callable[[], str | None]) -> None:
    EXTRA_CHECKS[name] = check


def _probe(backend: LLMBackend) -> str:
    url, headers, hint = backend.health_probe()
    try:
        response = httpx.get(url, headers=headers, timeout=PROBE_TIMEOUT_S)
    except httpx.HTTPError:
        return f"unreachable at {url.rsplit('/', 1)[0]} — {hint}"
    if response.status_code in (401, 403):
        return f"{url} refused the credentials (HTTP {response.status_code}) — {hint}"
    if response.status_code >= 400:
        return f"{url} answered HTTP {response.status_code} — {hint}"
    return "ok"


def llm_health() -> dict:
    """`{"status": "ok"|"unreachable", "summary": "ok" or the first problem, "backends": {name:
    {"status", "profiles"}}}` for the backends used by at least one profile (Ollama if none)."""
    used: dict[str, list[str]] = {}
    for profile_id, backend_name in Profile.objects.values_list("id", "llm_backend"):
        used.setdefault(backend_name or "ollama", []).append(profile_id)
    if not used:
        used = {"ollama": []}
    registry = get_agent().backends
    backends: dict[str, dict] = {}
    probes = {}
    with ThreadPoolExecutor(max_workers=len(used)) as pool:
        for name in sorted(used):
            try:
                probes[name] = pool.submit(_probe, registry.get(name))
            except Exception as exc:  # an unknown backend name: report, don't crash
                backends[name] = {"status": f"error: {exc}", "profiles": used[name]}
        for name, future in probes.items():
            backends[name] = {"status": future.result(), "profiles": used[name]}
    problems = [f"{name}: {b['status']}" for name, b in sorted(backends.items()) if b["status"] != "ok"]
    if not problems:
        summary = "ok"
    elif len(backends) == 1:
        summary = next(iter(backends.values()))["status"]
    else:
        summary = "; ".join(problems)
    return {"status": "unreachable" if problems else "ok", "summary": summary, "backends": backends}


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
    """"ok", or what is wrong with an LLM backend that a profile uses."""
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
    llm = _cached(f"llm:{connections.ollama_url()}:{settings.OPENAI_BASE_URL}", _check_llm)
    report = {
        "status": "ok" if llm == "ok" else "degraded",
        "db": _check_db(),
        "channel_layer": _check_channel_layer(),
        "llm": llm,
    }
    for name, check in EXTRA_CHECKS.items():
        try:
            outcome = check()
        except Exception as exc:  # report, don't crash
            outcome = f"error: {exc}"
        if outcome is not None:
            report[name] = outcome
            if outcome != "ok":
                report["status"] = "degraded"
    if not request.user.is_authenticated:
        report = {"status": report["status"]}
    else:
        report["mcp"] = mcp_service.health_for(request.user)  # enabled MCP servers that fail, and why
    return JsonResponse(report)
