"""Where a routine's results go: the owner's notification targets (notify_app), in one place.

Each outcome is recorded on the RoutineRun (`deliveries`): one entry per target with `ok` and
the error, so a failed delivery is visible on /routines/ and in GET /routines/<id>/runs. A user
without targets gets one entry saying so (never a silent nothing). Until notify_app is
installed, that entry says notifications are not available in this build.
"""

from __future__ import annotations

import logging

from django.utils import timezone

from navi_project.hop import db_hop

from .models import Routine, RoutineRun

try:  # notify_app is built in parallel; routines work (and say so) without it
    from notify_app.delivery import notify_user
except ImportError:  # pragma: no cover - depends on the build
    notify_user = None

log = logging.getLogger(__name__)
MAX_BODY = 1000


def run_url(run: RoutineRun) -> str:
    return f"/#{run.session_id}" if run.session_id else "/routines/"


MODEL_CODES = {"model_missing", "llm_unreachable"}


def fix_url(routine: Routine, code: str) -> str:
    """Where a failure is fixed: the model and its server in Settings for a model the server
    lacks or a server that does not answer; else the routine's card (its last error, Run now)."""
    return "/settings/#connections" if code in MODEL_CODES else f"/routines/#routine-{routine.pk}"


def fix_words(code: str) -> str:
    if code == "model_missing":
        return "Pick a model the server has (Settings → Models and connections, or the chat's model menu), then Run now."
    if code == "llm_unreachable":
        return "Check the model server's address in Settings → Models and connections, then Run now."
    return "Open the routine to see its last error and run it again."


def _streak_started_before(run: RoutineRun) -> bool:
    """Did the routine's previous finished run fail too? (The owner was told then.)"""
    before = (RoutineRun.objects.filter(routine_id=run.routine_id, finished_at__isnull=False)
              .exclude(pk=run.pk).exclude(status=RoutineRun.Status.MISSED).order_by("-finished_at").first())
    return before is not None and before.status == RoutineRun.Status.FAILED


async def failure(routine: Routine, run: RoutineRun, error: str, code: str) -> list[dict]:
    """A failed run tells the owner once per failure streak, with a link that fixes it; a run
    that fails again after that records why nothing was sent."""
    if await db_hop(_streak_started_before, run):
        return [{"target_id": None, "kind": "not sent", "ok": False, "skipped": True, "at": timezone.now().isoformat(),
                 "error": "the owner was told at the first failure in a row; told again after a run that works"}]
    return await deliver(routine, run, title=f"Routine failed: {routine.name}", body=f"{error}\n\n{fix_words(code)}",
                         url=fix_url(routine, code))


async def deliver(routine: Routine, run: RoutineRun, *, title: str, body: str, url: str = "") -> list[dict]:
    """Send to every target of the owner; the outcome entries to record on the run."""
    at = timezone.now().isoformat()
    if notify_user is None:
        return [{"target_id": None, "kind": "none", "ok": False, "at": at,
                 "error": "no notification targets: notifications are not available in this build"}]
    try:
        outcome = await notify_user(routine.owner_id, title=title[:200], body=body[:MAX_BODY], url=url or run_url(run),
                                    tag=f"routine-{routine.pk}")
    except Exception as exc:
        log.exception("routines: delivering run %s failed", run.pk)
        return [{"target_id": None, "kind": "error", "ok": False, "at": at, "error": f"{type(exc).__name__}: {exc}"}]
    if not outcome:
        return [{"target_id": None, "kind": "none", "ok": False, "at": at,
                 "error": "no notification targets: add one on /settings to be told about routine results"}]
    return [{**item, "at": at} for item in outcome]
