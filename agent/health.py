"""LLM reachability for /health: the backends the profiles actually use, each probed once."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import httpx

from agent.llm import LLMBackend

PROBE_TIMEOUT_S = 1.5


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
    from agent.models import Profile
    from agent.registry import get_agent

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
