"""The current date and time for the system prompt, so "what's on today?" and "remind me
tomorrow" work. Minute resolution, taken once per turn (the conversation's `clock`): every call
of a turn (planning, answer, each tool step) sends the same system message. Many chat templates
render the tool schemas after the system message, so a clock that moved between two calls would
make a server's prefix cache re-read the whole tool block; the line goes last so the persona and
profile prefix stays cacheable even across turns."""

from __future__ import annotations

from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

from django.conf import settings


def now() -> datetime:
    return datetime.now(ZoneInfo(settings.TIME_ZONE))


CLOCK_START = "Current date and time: "


def clock_line(moment: datetime | None = None) -> str:
    moment = moment or now()
    offset = moment.strftime("%z")
    offset = f"UTC{offset[:3]}:{offset[3:]}" if offset else "UTC"
    days = ", ".join(f"{moment + timedelta(days=n):%a %d %b}" for n in range(1, 8))
    return (
        f"{CLOCK_START}{moment:%A, %d %B %Y, %H:%M} "
        f"(time zone {settings.TIME_ZONE}, {offset}). The next seven days: {days}. "
        "Use them for 'today', 'tomorrow', 'next Friday' and other dates."
    )  # the days spelled out: a small model counts weekdays wrong
