"""REST for routines (DESIGN §9) and the /routines/ page.

Every path needs a login (cookie + CSRF) or a Bearer token; another user's routine id is a 404
like a missing one. Bad input is a 400 naming the problem, and nothing is saved.
"""

from __future__ import annotations

import asyncio
import math
import weakref
from datetime import timedelta

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.db.models import OuterRef, Subquery
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.utils import timezone

from navi_project.hop import db_hop
from navi_project.http import ApiError, json_view, parse_json_body
from sessions_app.auth import api_login_required, unauthenticated_response

from . import phrases, services
from . import schedule as sched
from .models import Routine, RoutineRun
from .scheduler import get_scheduler

RUNS_SHOWN = 100
STOP_VALUES = {"1": True, "true": True, "yes": True, "0": False, "false": False, "no": False, "": False}


def _owned(request: HttpRequest, routine_id: str) -> Routine:
    routine = Routine.objects.filter(pk=int(routine_id), owner=request.user).first() if str(routine_id).isdigit() else None
    if routine is None:
        raise ApiError(f"no routine '{routine_id}'", 404)
    return routine


@api_login_required
@json_view("GET", "POST")
def routines(request: HttpRequest) -> JsonResponse:
    if request.method == "GET":
        rows = list(Routine.objects.filter(owner=request.user).order_by("name", "id"))
        last = {r.routine_id: r for r in RoutineRun.objects.filter(pk__in=Subquery(
            RoutineRun.objects.filter(routine=OuterRef("routine")).order_by("-scheduled_for").values("pk")[:1]
        ), routine__owner=request.user)}
        return JsonResponse({"routines": [services.as_dict(r, last.get(r.pk)) for r in rows]})
    data = parse_json_body(request, allow_empty=False)
    try:
        routine = services.create(request.user, data)
    except services.RoutineError as exc:
        raise ApiError(str(exc), 400) from None
    return JsonResponse(services.as_dict(routine, None), status=201)


@api_login_required
@json_view("GET")
def routine_preview(request: HttpRequest) -> JsonResponse:
    """`?text=every weekday at 8&time_zone=Europe/Berlin` → the schedule it means and its next
    three runs in that zone (the owner's when none is given); nothing is saved."""
    tz = request.GET.get("time_zone", "").strip() or services.user_zone(request.user.pk)
    now = timezone.now()
    try:
        schedule = phrases.parse_phrase(request.GET.get("text", ""), tz, now)
        parsed = sched.parse(schedule, tz, now=now, anchor=now, min_interval_s=int(settings.ROUTINE_MIN_INTERVAL_S))
    except sched.ScheduleError as exc:
        raise ApiError(str(exc), 400) from None
    fires = sched.next_fires(parsed, next(sched.slots_after(parsed, now), None))
    return JsonResponse({
        "schedule": parsed.as_json(), "description": phrases.describe(parsed.as_json()), "time_zone": tz,
        "next_runs": [f.astimezone(sched.zone(tz)).isoformat() for f in fires],
    })


@api_login_required
@json_view("GET", "PATCH", "DELETE")
def routine_detail(request: HttpRequest, routine_id: str) -> JsonResponse:
    routine = _owned(request, routine_id)
    if request.method == "GET":
        return JsonResponse(services.as_dict(routine))
    if request.method == "DELETE":
        stop = request.GET.get("stop", "0").strip().lower()
        if stop not in STOP_VALUES:
            raise ApiError(f"stop is {stop[:20]!r}; send ?stop=1 to stop the routine's run in progress, or "
                           "?stop=0 (the default) to let it finish in its chat", 400)
        return JsonResponse({**services.delete(routine, stop=STOP_VALUES[stop]), "id": int(routine_id)})
    data = parse_json_body(request, allow_empty=False)
    try:
        services.update(routine, data)
    except services.RoutineError as exc:
        raise ApiError(str(exc), 400) from None
    return JsonResponse(services.as_dict(routine))


@api_login_required
@json_view("GET")
def routine_runs(request: HttpRequest, routine_id: str) -> JsonResponse:
    routine = _owned(request, routine_id)
    rows = routine.runs.order_by("-scheduled_for")[:RUNS_SHOWN]
    return JsonResponse([r.as_dict() for r in rows], safe=False)


async def routine_run_now(request: HttpRequest, routine_id: str) -> HttpResponse:
    """POST /routines/<id>/run: a run now, on this server's event loop → 202 {run_id}."""
    user = request.user if getattr(request, "navi_token_auth", False) else await request.auser()
    if not user.is_authenticated:
        return unauthenticated_response()
    if request.method != "POST":
        response = JsonResponse({"error": f"method {request.method} not allowed here; use POST"}, status=405)
        response["Allow"] = "POST"
        return response
    routine = await db_hop(_owned_by, user, routine_id)
    if routine is None:
        return JsonResponse({"error": f"no routine '{routine_id}'"}, status=404)
    async with _run_now_lock():  # the count and the claim together: a burst cannot slip past the limit
        wait = await db_hop(_run_now_wait, user.pk)
        if wait:
            response = JsonResponse({"error": (
                f"too many manual runs: at most {settings.ROUTINE_RUN_NOW_MAX} every "
                f"{settings.ROUTINE_RUN_NOW_WINDOW_S} s; try again in {wait} s (the schedule keeps running)")}, status=429)
            response["Retry-After"] = str(wait)
            return response
        run = await get_scheduler().run_now(routine)
    return JsonResponse({"run_id": run.pk}, status=202)


_run_now_locks: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _run_now_lock() -> asyncio.Lock:
    """This event loop's lock (an asyncio.Lock belongs to one loop)."""
    loop = asyncio.get_running_loop()
    if loop not in _run_now_locks:
        _run_now_locks[loop] = asyncio.Lock()
    return _run_now_locks[loop]


def _run_now_wait(user_id: int) -> int:
    """Seconds until this user may start another manual run (0: now). Counted from the runs'
    rows, so every worker process shares the count."""
    window = timedelta(seconds=settings.ROUTINE_RUN_NOW_WINDOW_S)
    now = timezone.now()
    recent = list(RoutineRun.objects.filter(routine__owner_id=user_id, manual=True, started_at__gt=now - window)
                  .order_by("-started_at").values_list("started_at", flat=True)[: settings.ROUTINE_RUN_NOW_MAX])
    if len(recent) < settings.ROUTINE_RUN_NOW_MAX:
        return 0
    return max(1, math.ceil((recent[-1] + window - now).total_seconds()))


def _owned_by(user, routine_id: str) -> Routine | None:
    if not str(routine_id).isdigit():
        return None
    return Routine.objects.filter(pk=int(routine_id), owner=user).first()


@login_required
def routines_page(request: HttpRequest) -> HttpResponse:
    """The page; its data comes from the REST paths above (static/js/routines.js)."""
    return render(request, "routines.html")
