"""Where a routine's results go: the owner's notification targets (notify_app), in one place.

Each outcome is recorded on the RoutineRun (`deliveries`): one entry per target with `ok` and
the error, so a failed delivery is visible on /routines/ and in GET /routines/<id>/runs. A user
without targets gets one entry saying so (never a silent nothing). Until notify_app is
installed, that entry says notifications are not available in this build.
"""

from __future__ import annotations

import logging

from django.utils import timezone

from .models import Routine, RoutineRun

try:  # notify_app is built in parallel; routines work (and say so) without it
    from notify_app.delivery import notify_user
except ImportError:  # pragma: no cover - depends on the build
    notify_user = None

log = logging.getLogger(__name__)
MAX_BODY = 1000


def run_url(run: RoutineRun) -> str:
    return f"/#{run.session_id}" if run.session_id else "/routines/"


async def deliver(routine: Routine, run: RoutineRun, *, title: str, body: str) -> list[dict]:
    """Send to every target of the owner; the outcome entries to record on the run."""
    at = timezone.now().isoformat()
    if notify_user is None:
        return [{"target_id": None, "kind": "none", "ok": False, "at": at,
                 "error": "no notification targets: notifications are not available in this build"}]
    try:
        outcome = await notify_user(routine.owner_id, title=title[:200], body=body[:MAX_BODY], url=run_url(run),
                                    tag=f"routine-{routine.pk}")
    except Exception as exc:
        log.exception("routines: delivering run %s failed", run.pk)
        return [{"target_id": None, "kind": "error", "ok": False, "at": at, "error": f"{type(exc).__name__}: {exc}"}]
    if not outcome:
        return [{"target_id": None, "kind": "none", "ok": False, "at": at,
                 "error": "no notification targets: add one on /settings to be told about routine results"}]
    return [{**item, "at": at} for item in outcome]
