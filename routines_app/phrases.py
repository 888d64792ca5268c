"""Plain-language schedules ("every weekday at 8", "in 20 minutes") turned into the REST shapes
`{"cron"}`, `{"every_s"}` or `{"at"}` (pure functions, no ORM).

No library covers this small grammar in both directions without pulling in a date parser that
guesses (dateparser reads "8" as a day of the month); a few explicit patterns say clearly what
they understood, and anything else gets an error listing what does work.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta

from .schedule import MAX_AHEAD_DAYS, ScheduleError, parse, zone

EXAMPLES = (
    '"every day at 7:30", "every weekday at 8", "every Monday and Thursday at 18:00", "every 2 hours", '
    '"on the 1st of each month at 9", "tomorrow at 9", "in 20 minutes" or a cron line such as "0 8 * * 1-5"'
)
MAX_TEXT = 200
DAYS = {"sunday": 0, "monday": 1, "tuesday": 2, "wednesday": 3, "thursday": 4, "friday": 5, "saturday": 6}
SHORT = {d[:3]: n for d, n in DAYS.items()} | {"tues": 2, "wed": 3, "thur": 4, "thurs": 4}
UNITS = {"minute": 60, "min": 60, "mins": 60, "hour": 3600, "hr": 3600, "hrs": 3600, "day": 86400, "week": 604800}
TIME = r"(?:(?P<h>\d{1,2})(?:[:.h](?P<m>\d{2}))?\s*(?P<ampm>am|pm|a\.m\.|p\.m\.)?|(?P<word>noon|midday|midnight))"
CRON = re.compile(r"^\s*\S+(\s+\S+){4}\s*$")


class PhraseError(ScheduleError):
    """The words are not a schedule this parser knows; the message lists what works."""


def _time(match: re.Match) -> tuple[int, int]:
    """Hour and minute of a TIME match ("8" = 08:00, "6pm" = 18:00, "noon")."""
    if match.group("word"):
        return (0, 0) if match.group("word") == "midnight" else (12, 0)
    hour, minute = int(match.group("h")), int(match.group("m") or 0)
    ampm = (match.group("ampm") or "").replace(".", "")
    if ampm and not 1 <= hour <= 12:
        raise PhraseError(f"{hour} {ampm} is not a time; use 1–12 with am/pm, or 0–23")
    if ampm == "pm" and hour != 12:
        hour += 12
    elif ampm == "am" and hour == 12:
        hour = 0
    if hour > 23 or minute > 59:
        raise PhraseError(f"{hour}:{minute:02d} is not a time of day; use e.g. 7:30 or 18:00")
    return hour, minute


def _day(word: str) -> int | None:
    word = word.lower().rstrip("s") if word.lower().endswith("days") else word.lower()
    return DAYS.get(word, SHORT.get(word.rstrip(".")))


def _days(text: str) -> list[int] | None:
    """Weekday numbers of "monday and thursday", "mon, wed, fri"; None if a word is not a day."""
    words = [w for w in re.split(r"\s*(?:,|\band\b|&|\+)\s*", text.strip()) if w]
    found = [_day(w) for w in words]
    return None if not found or None in found else sorted(set(found))


def parse_phrase(text: object, tz: str, now: datetime) -> dict:
    """The REST schedule for `text` in zone `tz` at `now` (aware), or PhraseError."""
    if not isinstance(text, str) or not text.strip():
        raise PhraseError(f"say when, e.g. {EXAMPLES}")
    if len(text) > MAX_TEXT:
        raise PhraseError(f"keep the schedule under {MAX_TEXT} characters, e.g. {EXAMPLES}")
    raw = " ".join(text.split())
    if CRON.match(raw):
        try:
            return {"cron": parse({"cron": raw}, tz, now=now).cron}
        except ScheduleError:
            pass  # five words that are not cron may still be a phrase
    s = raw.lower().rstrip(".!")
    s = re.sub(r"^(?:remind me |run |do it )?", "", s)
    local = now.astimezone(zone(tz))
    for pattern, build in _RULES:
        m = re.fullmatch(pattern, s)
        if m:
            return build(m, local)
    raise PhraseError(f"cannot read {raw!r} as a schedule; try {EXAMPLES}")


def _at(local: datetime, hour: int, minute: int, days_ahead: int = 0) -> dict:
    when = (local + timedelta(days=days_ahead)).replace(hour=hour, minute=minute, second=0, microsecond=0)
    return {"at": when.isoformat()}


def _in(m: re.Match, local: datetime) -> dict:
    n = 1 if m.group("n") in ("a", "an", None) else int(m.group("n"))
    unit = m.group("unit").rstrip("s") if m.group("unit") not in UNITS else m.group("unit")
    seconds = n * UNITS[unit]  # a Python int: "in 99999999999999999999 weeks" is counted, not overflowed
    if seconds > MAX_AHEAD_DAYS * 86400:
        raise PhraseError(f"'in {n} {m.group('unit')}' is more than 100 years away; say a time within the next "
                          "100 years, e.g. 'in 20 minutes', 'in 3 weeks' or 'tomorrow at 9'")
    when = local + timedelta(seconds=seconds)
    return {"at": when.replace(microsecond=0).isoformat()}


def _every_n(m: re.Match, local: datetime) -> dict:
    n = 1 if m.group("n") in (None, "a", "an") else int(m.group("n"))
    unit = m.group("unit")
    seconds = UNITS.get(unit, UNITS.get(unit.rstrip("s"), 0))
    if n < 1:
        raise PhraseError("the interval must be at least 1, e.g. 'every 2 hours'")
    return {"every_s": n * seconds}


def _daily(m: re.Match, local: datetime) -> dict:
    hour, minute = _time(m)
    return {"cron": f"{minute} {hour} * * *"}


def _weekdays(m: re.Match, local: datetime) -> dict:
    hour, minute = _time(m)
    days = "1-5" if m.group("which") in ("weekday", "weekdays", "working day", "workday") else "0,6"
    return {"cron": f"{minute} {hour} * * {days}"}


def _on_days(m: re.Match, local: datetime) -> dict:
    days = _days(m.group("days"))
    if days is None:
        raise PhraseError(f"{m.group('days')!r} are not weekdays; name them, e.g. every Monday and Thursday at 18:00")
    hour, minute = _time(m)
    return {"cron": f"{minute} {hour} * * {','.join(map(str, days))}"}


def _monthly(m: re.Match, local: datetime) -> dict:
    day = int(m.group("dom"))
    if not 1 <= day <= 31:
        raise PhraseError(f"the {day}th is not a day of the month; use 1 to 31")
    hour, minute = _time(m)
    return {"cron": f"{minute} {hour} {day} * *"}


def _today(m: re.Match, local: datetime) -> dict:
    hour, minute = _time(m)
    ahead = {"today": 0, "tonight": 0, "tomorrow": 1, None: 0}[m.group("day")]
    if m.group("day") is None and (hour, minute) <= (local.hour, local.minute):
        ahead = 1  # "at 9" after nine: tomorrow's
    return _at(local, hour, minute, ahead)


def _next_day(m: re.Match, local: datetime) -> dict:
    target = _day(m.group("day"))
    if target is None:
        raise PhraseError(f"{m.group('day')!r} is not a weekday")
    hour, minute = _time(m)
    ahead = (target - (local.isoweekday() % 7)) % 7
    if ahead == 0 and (hour, minute) <= (local.hour, local.minute):
        ahead = 7
    return _at(local, hour, minute, ahead)


_AT = rf"(?:at |@ ?)?{TIME}"
_N = r"(?P<n>\d+|an?)"
_UNIT = r"(?P<unit>minutes?|mins?|hours?|hrs?|days?|weeks?)"
_RULES = [
    (rf"in {_N} {_UNIT}", _in),
    (rf"every {_N} {_UNIT}", _every_n),
    (r"every (?P<n>)(?P<unit>minute|hour)|(?P<unit2>hourly)", lambda m, lo: {"every_s": 3600 if m.group("unit2") else UNITS[m.group("unit")]}),
    (rf"(?:every ?day|daily|each day) {_AT}", _daily),
    (rf"(?:every|each|on) (?P<which>weekdays?|working day|workday|weekends?) {_AT}", _weekdays),
    (rf"(?:every|each|on) (?P<days>[a-z., &+]+?) {_AT}", _on_days),
    (rf"(?:on the |every month on the |each month on the )(?P<dom>\d{{1,2}})(?:st|nd|rd|th)?(?: of (?:each|every) month)? {_AT}", _monthly),
    (rf"(?:(?P<day>today|tonight|tomorrow) )?{_AT}", _today),
    (rf"(?:next |this |on )?(?P<day>[a-z]+) {_AT}", _next_day),
]


def describe(schedule: dict) -> str:
    """A short plain reading of a REST schedule, for the preview."""
    if "every_s" in schedule:
        n = schedule["every_s"]
        for unit, size in (("week", 604800), ("day", 86400), ("hour", 3600), ("minute", 60)):
            if n % size == 0:
                k = n // size
                return f"every {unit}" if k == 1 else f"every {k} {unit}s"
        return f"every {n} seconds"
    if "at" in schedule:
        return f"once, at {schedule['at']}"
    words = _cron_words(schedule["cron"])
    return f"{words}(cron {schedule['cron']})" if words else f"cron {schedule['cron']}"


def _cron_words(cron: str) -> str:
    """The cron lines this parser writes, read back ("every Mon and Thu at 18:00 "); else ""."""
    minute, hour, dom, month, dow = cron.split()
    if not (minute.isdigit() and hour.isdigit()) or month != "*":
        return ""
    at = f"at {int(hour):02d}:{int(minute):02d} "
    names = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"]
    if dom == "*" and dow == "*":
        return f"every day {at}"
    if dom == "*" and dow == "1-5":
        return f"every weekday {at}"
    if dom == "*" and dow == "0,6":
        return f"every weekend day {at}"
    if dom == "*" and re.fullmatch(r"[0-6](,[0-6])*", dow):
        days = [names[int(d)] for d in dow.split(",")]
        return f"every {' and '.join([', '.join(days[:-1]), days[-1]] if len(days) > 1 else days)} {at}"
    if dom.isdigit() and dow == "*":
        return f"on day {dom} of each month {at}"
    return ""
