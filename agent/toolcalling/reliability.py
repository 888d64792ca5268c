"""Per-model tool-calling reliability counters (agent.ModelReliability), counted as calls happen."""

from __future__ import annotations

import logging

from django.db.models import F

from agent.models import ModelReliability

log = logging.getLogger(__name__)
FIELDS = ("native_calls", "recovered_calls", "repaired_arguments", "refused_calls", "unknown_tools", "broken_loops",
          "repeated_calls", "constrained_calls")


async def count(backend: str, model: str, **increments: int) -> None:
    """Add to the counters of (backend, model); a counting failure never disturbs a run."""
    increments = {k: v for k, v in increments.items() if v and k in FIELDS}
    if not increments:
        return
    try:
        row, _ = await ModelReliability.objects.aget_or_create(backend=backend, model=model[:200])
        await ModelReliability.objects.filter(pk=row.pk).aupdate(**{k: F(k) + v for k, v in increments.items()})
    except Exception:
        log.warning("could not count tool-call reliability for %s/%s", backend, model, exc_info=True)


async def note_constrained(backend: str, model: str, way: str) -> None:
    """Record how (or whether) the server enforces JSON schemas for this model."""
    try:
        row, _ = await ModelReliability.objects.aget_or_create(backend=backend, model=model[:200])
        await ModelReliability.objects.filter(pk=row.pk).aupdate(constrained_output=way[:32])
    except Exception:
        log.warning("could not record constrained output for %s/%s", backend, model, exc_info=True)


async def table() -> list[dict]:
    """Every model's counters, for /debug."""
    return [row async for row in ModelReliability.objects.order_by("backend", "model").values("backend", "model", *FIELDS, "constrained_output")]
