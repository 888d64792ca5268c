"""/health: the dependencies the server needs — the database, the channel layer, LLM reachability
(the backends the profiles actually use, each probed once and the answer cached for a few
seconds) and what apps register (the vector index, Telegram, …). Any of them not working makes
the status `degraded`, with the reason in that dependency's entry (DESIGN §11)."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

import httpx
import redis
from channels.layers import get_channel_layer
from django.conf import settings
from django.db import connection
from django.http import HttpRequest, JsonResponse
from django.views.decorators.http import require_GET

from agent.llm import LLMBackend
from agent.models import Profile
from agent.registry import get_agent
from jobs_app.health import jobs_health
from navi_project import connections
from tools_app.mcp import service as mcp_service

PROBE_TIMEOUT_S = 1.5
REDIS_PING_TIMEOUT_S = 1.0
# Dependencies that apps add from their AppConfig.ready (e.g. messaging_app's "telegram", the
# vector index): name -> function returning "ok", the problem (a string), a dict whose "status"
# is "ok" or not (an entry with details), or None when the part is switched off.
EXTRA_CHECKS: dict[str, Callable[[], str | dict | None]] = {}


def register_check(name: str, check: Callable[[], str | dict | None]) -> None:
    EXTRA_CHECKS[name] = check


def is_ok(outcome: str | dict) -> bool:
    """Whether a dependency's entry says it works."""
    return (outcome.get("status") if isinstance(outcome, dict) else outcome) == "ok"


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
    """"ok", or why frames cannot reach other workers: this process's layer is in an outage
    (navi_project.redis_layer), or Redis does not answer a PING now. A PING on a connection of
    its own: a round trip through the layer's shared receive would wait behind the sockets'."""
    layer = get_channel_layer()
    if layer is None:
        return "error: no channel layer configured"
    outage = getattr(layer, "outage", None)
    if outage is not None and (why := outage()):
        return f"error: {why}"
    for host in getattr(layer, "hosts", None) or []:
        try:
            _ping_redis(host)
        except Exception as exc:  # report, don't crash: this is what /health is for
            return f"error: Redis unreachable: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    return "ok"


def _ping_redis(host: dict) -> None:
    options = {k: v for k, v in host.items() if k not in ("address", "max_connections", "socket_timeout")}
    options.update(socket_timeout=REDIS_PING_TIMEOUT_S, socket_connect_timeout=REDIS_PING_TIMEOUT_S)
    client = (redis.Redis.from_url(host["address"], **options) if "address" in host else redis.Redis(**options))
    try:
        client.ping()
    finally:
        client.close()


def _check_llm() -> str:
    """"ok", or what is wrong with an LLM backend that a profile uses."""
    return llm_health()["summary"]


LLM_PROBE_TTL_S = 10.0
_llm_probe_cache: dict[str, tuple[float, str]] = {}


CHANNEL_LAYER_TTL_S = 1.0


def _cached(key: str, probe, ttl: float | None = None) -> str:
    """The probe's answer, reused for `ttl` seconds: /health is public, and a flood of it must
    not become a flood of requests to the LLM server or of connections to Redis."""
    now = time.monotonic()
    hit = _llm_probe_cache.get(key)
    if hit is not None and now - hit[0] < (LLM_PROBE_TTL_S if ttl is None else ttl):
        return hit[1]
    answer = probe()
    _llm_probe_cache[key] = (now, answer)
    return answer


@require_GET
def health(request: HttpRequest) -> JsonResponse:
    """Liveness for everyone (monitors need no login): `ok`, or `degraded` when a dependency the
    server needs is not working (the database, the channel layer, an LLM backend a profile uses,
    what apps registered). Which one, and why, only for signed-in users."""
    report: dict = {
        "status": "ok",
        "db": _check_db(),
        "channel_layer": _cached("channel_layer", _check_channel_layer, CHANNEL_LAYER_TTL_S),
        "llm": _cached(f"llm:{connections.ollama_url()}:{settings.OPENAI_BASE_URL}", _check_llm),
    }
    try:
        report["jobs"] = jobs_health()  # queued, oldest_s, workers; not ok when jobs wait and no worker lives
    except Exception as exc:  # report, don't crash
        report["jobs"] = {"status": f"error: {exc}"}
    for name, check in EXTRA_CHECKS.items():
        try:
            outcome = check()
        except Exception as exc:  # report, don't crash
            outcome = f"error: {exc}"
        if outcome is not None:
            report[name] = outcome
    if not all(is_ok(outcome) for name, outcome in report.items() if name != "status"):
        report["status"] = "degraded"
    if not request.user.is_authenticated:
        report = {"status": report["status"]}
    else:
        report["mcp"] = mcp_service.health_for(request.user)  # enabled MCP servers that fail, and why
    return JsonResponse(report)
