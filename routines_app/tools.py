"""The agent's routine tools: `schedule_routine`, `list_routines`, `cancel_routine`.

Registered with the process-wide tool registry from RoutinesConfig.ready. They act for the
run's user (`current_user_id`). A run started by a routine (`current_run_origin == "routine"`)
must ask the owner before it creates or cancels routines (Tool.approval_reason), so a routine
cannot multiply itself unattended.
"""

from __future__ import annotations

import re
from typing import Any

from django.contrib.auth import get_user_model
from django.db.models import Q
from django.utils import timezone

from navi_project.hop import db_hop
from sessions_app.models import Session
from tools_app.base import Tool, ToolResult
from tools_app.context import current_chat_session_id, current_run_origin, current_taint, current_user_id
from tools_app.toolset import register_app_tools

from . import phrases, services
from .models import Routine
from .schedule import ScheduleError
from .scheduler import ORIGIN, wake_all


def _owner_id() -> int:
    owner = current_user_id.get()
    if owner is None:
        raise RuntimeError("no user for this run: routine tools only work inside a chat run")
    return owner


class _RoutineTool(Tool):
    def approval_reason(self, arguments: Any) -> str:
        if current_run_origin.get() == ORIGIN:
            return (f"a routine's own unattended run wants to call {self.name}; routines may not create or "
                    "change routines without the owner's approval")
        return ""


class ScheduleRoutineTool(_RoutineTool):
    name = "schedule_routine"
    keywords = "remind reminder schedule later tomorrow every daily weekly hourly cron recurring routine job at in minutes"
    examples = (
        "remind me to water the plants every Sunday at 10",
        "in two hours, tell me to take the cake out",
        "every morning at 7, send me the news headlines",
        "set a reminder for the dentist appointment next Tuesday",
    )
    description = (
        "Schedule an instruction for Navi to run later. Easiest: `when` in plain words, e.g. 'every weekday at 8', "
        "'every Monday and Thursday at 18:00', 'every 2 hours', 'on the 1st of each month at 9', 'tomorrow at 9', "
        "'in 20 minutes'. Or: once (`at`, an ISO 8601 date-time with offset, e.g. "
        "2026-05-01T08:00:00+02:00; compute it from the current date and time), on a cron schedule (`cron`, "
        "'minute hour day-of-month month day-of-week' in the user's time zone, e.g. '0 8 * * 1-5' for weekdays "
        "at 08:00) or every N seconds (`every_s`). Give exactly one of when/at/cron/every_s. `instruction` is what "
        "you will be asked at that time, e.g. 'Remind the user to stretch.' The answer lists the next fire "
        "times: check them against what the user asked."
    )
    parameters = {
        "type": "object",
        "properties": {
            "name": {"type": "string", "description": "short name, e.g. 'Stretch reminder'"},
            "when": {"type": "string", "description": "the schedule in plain words, e.g. 'every weekday at 8'"},
            "instruction": {"type": "string", "description": "the message Navi runs at each time"},
            "at": {"type": "string", "description": "one-shot ISO 8601 date-time with offset"},
            "cron": {"type": "string", "description": "5-field cron expression in the time zone"},
            "every_s": {"type": "integer", "description": "interval in seconds (at least 60)"},
            "time_zone": {"type": "string", "description": "IANA zone; default the user's"},
        },
        "required": ["name", "instruction"],
    }

    async def execute(self, params: dict[str, Any]) -> ToolResult:
        given = [k for k in ("when", "at", "cron", "every_s") if params.get(k) not in (None, "")]
        if len(given) != 1:
            return ToolResult(False, error="give exactly one of when (plain words, e.g. 'every weekday at 8'), at "
                                           f"(ISO date-time), cron (5 fields) or every_s (seconds); got {', '.join(given) or 'none'}")
        data = {"name": params.get("name"), "instruction": params.get("instruction"),
                "schedule": {given[0]: params[given[0]]}}
        if params.get("time_zone"):
            data["time_zone"] = params["time_zone"]
        try:
            routine, fires = await db_hop(_create, _owner_id(), data, current_taint.get(), current_chat_session_id.get())
        except (services.RoutineError, ScheduleError) as exc:
            return ToolResult(False, error=f"not scheduled: {exc}")
        except (OverflowError, OSError):  # a date or zone past what the calendar holds: never the raw text
            return ToolResult(False, error="not scheduled: that time or time zone is outside what Navi can schedule; "
                                           "give a time within the next 100 years (e.g. when='in 20 minutes') and an "
                                           "IANA time zone such as Europe/Paris")
        wake_all()
        marked = (" It is marked as made after reading untrusted content: its runs ask before contacting any host "
                  "until the user confirms it on /routines/.") if routine.tainted_by else ""
        return ToolResult(True, f"Scheduled routine #{routine.id} '{routine.name}' ({routine.time_zone}). "
                                f"Next runs: {fires}. The user can see and change it on /routines/.{marked}",
                          metadata={"routine_id": routine.id})


def _create(owner_id: int, data: dict, taint: str, chat_id: str | None) -> tuple[Routine, str]:
    """The routine, marked when the chat had read untrusted content (its runs start tainted)."""
    (key, value), = data["schedule"].items()
    # Plain words, in `when` or (a small model's habit) in `cron` / `at`: read in the routine's zone.
    if key == "when" or (isinstance(value, str) and key in ("cron", "at") and _wordy(value)):
        tz = data.get("time_zone") or services.user_zone(owner_id)
        data = {**data, "schedule": phrases.parse_phrase(value, tz, timezone.now()), "words": value.strip()[:200]}
    source = chat_id if chat_id and Session.objects.filter(pk=chat_id, owner_id=owner_id).exists() else None
    routine = services.create(get_user_model().objects.get(pk=owner_id), data, tainted_by=taint, source_session_id=source)
    return routine, services.describe_fires(routine)


def _wordy(value: str) -> bool:
    """Words rather than cron fields or an ISO date ("every weekday at 8", "tomorrow at 9")."""
    return bool(re.search(r"\b(every|each|daily|hourly|in|at|on|tomorrow|today|tonight)\b", value.lower()))


class ListRoutinesTool(Tool):
    name = "list_routines"
    keywords = "routines reminders scheduled jobs list what is scheduled"
    examples = (
        "which reminders do I have set?",
        "what have you got scheduled for me?",
        "show my recurring jobs",
    )
    description = "List the user's routines (scheduled instructions) with their ids, schedules and next run times."
    parameters = {"type": "object", "properties": {}}

    async def execute(self, params: dict[str, Any]) -> ToolResult:
        text = await db_hop(_listing, _owner_id())
        return ToolResult(True, text)


def _listing(owner_id: int) -> str:
    rows = list(Routine.objects.filter(owner_id=owner_id).order_by("id"))
    if not rows:
        return "The user has no routines."
    lines = []
    for r in rows:
        state = "" if r.enabled else " [paused]"
        lines.append(f"#{r.id} '{r.name}'{state}: {r.schedule} ({r.time_zone}); next: {services.describe_fires(r)}; "
                     f"instruction: {r.instruction[:200]}")
    return "\n".join(lines)


class CancelRoutineTool(_RoutineTool):
    name = "cancel_routine"
    keywords = "cancel delete stop remove routine reminder scheduled job"
    examples = (
        "cancel the plant watering reminder",
        "stop the daily news job",
        "I don't need that reminder any more, remove it",
    )
    description = "Delete one of the user's routines by its id (see list_routines) or exact name."
    parameters = {
        "type": "object",
        "properties": {"routine": {"type": "string", "description": "the routine's id or exact name"}},
        "required": ["routine"],
    }

    async def execute(self, params: dict[str, Any]) -> ToolResult:
        key = str(params.get("routine", "")).strip().lstrip("#")
        found = await db_hop(_cancel, _owner_id(), key)
        if not found:
            return ToolResult(False, error=f"no routine '{key}' of this user; call list_routines for the ids")
        wake_all()
        return ToolResult(True, f"Deleted routine {found}.")


def _cancel(owner_id: int, key: str) -> str:
    match = Q(name=key) | (Q(pk=int(key)) if key.isdigit() else Q(pk__in=[]))
    routine = Routine.objects.filter(match, owner_id=owner_id).first()
    if routine is None:
        return ""
    label = f"#{routine.id} '{routine.name}'"
    routine.delete()
    return label


def _make_schedule(_registry) -> Tool:
    return ScheduleRoutineTool()


def _make_list(_registry) -> Tool:
    return ListRoutinesTool()


def _make_cancel(_registry) -> Tool:
    return CancelRoutineTool()


def register() -> None:
    """Add the routine tools to the process-wide registry (RoutinesConfig.ready)."""
    register_app_tools(_make_schedule, _make_list, _make_cancel)
