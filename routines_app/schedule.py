"""A routine's schedule: validation, and its slots as UTC instants (pure functions, no ORM).

Three kinds, as in the REST body: `{"at": ISO 8601}` (once), `{"cron": "m h dom mon dow"}` (in the
routine's zone: `cronsim` matches the fields on the wall clock, zoneinfo places each match; every
matching wall time fires once: those a spring-forward skips fire once, at the first instant after
the gap, one a fall-back repeats fires the first time) and `{"every_s": N}` (every N seconds from the routine's anchor; zones do not matter).
A slot is the nominal instant; the routine fires at slot + jitter (deterministic per routine and
slot, so every worker computes the same instant).
"""

from __future__ import annotations

import hashlib
import math
import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone
from typing import Iterator
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

UTC = dt_timezone.utc
MAX_JITTER_S = 3600
SCAN_LIMIT = 1000  # slots counted one by one before a count says "more than"
MAX_AHEAD_DAYS = 36525  # a one-shot time at most 100 years ahead
MAX_EVERY_S = 366 * 86400  # the longest interval: a year


class ScheduleError(ValueError):
    """The schedule (or its zone, or jitter) is not valid; the message says what to send."""


@dataclass(frozen=True)
class Schedule:
    kind: str  # "at" | "cron" | "every"
    at: datetime | None = None  # UTC
    cron: str = ""
    every_s: int = 0
    tz: str = "UTC"
    anchor: datetime | None = None  # UTC; intervals count from here

    def as_json(self) -> dict:
        """The REST shape: `at` in the routine's zone with its offset."""
        if self.kind == "at":
            return {"at": self.at.astimezone(zone(self.tz)).isoformat()}
        if self.kind == "cron":
            return {"cron": self.cron}
        return {"every_s": self.every_s}


MAX_ZONE_CHARS = 64  # the longest IANA name is 32; the routine's column holds 64
ZONE_HINT = "give an IANA time zone such as Europe/Paris or America/New_York"


def zone(name: object) -> ZoneInfo:
    """The zone of an IANA name, or ScheduleError saying what to send (never an OSError for a
    name too long for a file name or one naming a folder of the zone database, like "Europe")."""
    if not isinstance(name, str) or not name:
        raise ScheduleError(f"time_zone must be text naming a zone; {ZONE_HINT}")
    if len(name) > MAX_ZONE_CHARS:
        raise ScheduleError(f"time_zone is {len(name)} characters, longer than any zone name; {ZONE_HINT}")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, TypeError, OSError):
        raise ScheduleError(f"unknown time zone {name!r}; {ZONE_HINT}") from None


def parse(raw: object, tz: str, *, now: datetime, anchor: datetime | None = None, min_interval_s: int = 60) -> Schedule:
    """A Schedule from the REST/tool shape, or ScheduleError naming the problem. A one-shot
    time without an offset is read in `tz`; one in the past is refused."""
    zone(tz)
    if not isinstance(raw, dict) or len(raw) != 1 or next(iter(raw)) not in ("at", "cron", "every_s"):
        raise ScheduleError(
            'schedule must be exactly one of {"at": "2026-05-01T08:00:00+02:00"}, {"cron": "0 8 * * 1-5"} '
            'or {"every_s": 3600}'
        )
    (key, value), = raw.items()
    if key == "at":
        at = _parse_at(value, tz)
        if at > now + timedelta(days=MAX_AHEAD_DAYS):  # slots, jitter and display stay in datetime's range
            raise ScheduleError(f'"at" {value!r} is more than 100 years away; give a time within the next 100 years')
        if at <= now:
            raise ScheduleError(
                f"the one-shot time {_shown(at, tz)} is in the past (now is "
                f"{now.astimezone(zone(tz)).isoformat(timespec='seconds')}); give a future time"
            )
        return Schedule("at", at=at, tz=tz)
    if key == "cron":
        return Schedule("cron", cron=_valid_cron(value), tz=tz)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or int(value) != value:
        raise ScheduleError("every_s must be a whole number of seconds, e.g. 3600 for every hour")
    if value < min_interval_s:
        raise ScheduleError(f"every_s is {int(value)}; the shortest interval is {min_interval_s} seconds: give "
                            f"{min_interval_s} to {MAX_EVERY_S}, e.g. 3600 for every hour")
    if value > MAX_EVERY_S:
        raise ScheduleError(f"every_s is over a year; give {min_interval_s} to {MAX_EVERY_S} seconds, or use a cron "
                            "expression or a one-shot time instead")
    return Schedule("every", every_s=int(value), tz=tz, anchor=(anchor or now).replace(microsecond=0))


def _shown(at: datetime, tz: str) -> str:
    """`at` in the zone for a message (in UTC where the zone's offset leaves datetime's range)."""
    try:
        return at.astimezone(zone(tz)).isoformat()
    except OverflowError:
        return at.isoformat()


def _parse_at(value: object, tz: str) -> datetime:
    if not isinstance(value, str):
        raise ScheduleError('"at" must be an ISO 8601 date-time string such as 2026-05-01T08:00:00+02:00')
    try:
        at = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        if re.match(r"\s*[+-]?\d{5,}", value):  # year 10000 and on: a date, but not one datetime holds
            raise ScheduleError(
                f'"at" {value[:40]!r} is outside the dates Navi can schedule; give a time within the next 100 years'
            ) from None
        raise ScheduleError(
            f'"at" {value[:80]!r} is not an ISO 8601 date-time; send e.g. 2026-05-01T08:00:00+02:00'
        ) from None
    if at.tzinfo is None:
        at = at.replace(tzinfo=zone(tz))
    try:
        return at.astimezone(UTC)
    except OverflowError:  # 9999-12-31T23:59:59-14:00 is in year 10000 in UTC, 0001-01-01+14:00 in year 0
        raise ScheduleError(
            f'"at" {value!r} is outside the dates Navi can schedule; give a time within the next 100 years'
        ) from None


def _valid_cron(value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ScheduleError('cron must be a string of five fields "minute hour day-of-month month day-of-week", '
                            'e.g. "0 8 * * 1-5" for weekdays at 08:00')
    expr = " ".join(value.split())
    if len(expr.split()) != 5:
        raise ScheduleError(
            f"invalid cron expression {value!r}: it needs 5 fields (minute hour day-of-month month day-of-week), "
            f"e.g. '0 8 * * 1-5' for weekdays at 08:00"
        )
    try:
        next(CronSim(expr, datetime(2000, 1, 1, tzinfo=UTC)))
    except (CronSimError, StopIteration, ValueError) as exc:
        raise ScheduleError(
            f"invalid cron expression {value!r}: {exc or 'it never matches'}; e.g. '0 8 * * 1-5' for weekdays at 08:00"
        ) from None
    return expr


# --- slots -----------------------------------------------------------------------------------
# Cron fields are matched on the routine's wall clock (naive local times, by cronsim) and each
# matching wall time is then placed on the UTC line: a repeated one at its first occurrence, a
# skipped one at the end of its gap. Several wall times landing on one instant are one slot.
MAX_SHIFT = timedelta(hours=3)  # wider than any DST shift, so a reverse scan starts late enough


def _gap_end(wall: datetime, tz: ZoneInfo) -> datetime:
    """The first instant (UTC) after the spring-forward gap that swallowed `wall`."""
    lo = wall.replace(tzinfo=tz, fold=1).astimezone(UTC)  # read with the later offset: before the gap
    hi = wall.replace(tzinfo=tz, fold=0).astimezone(UTC)  # read with the earlier offset: after it
    after = hi.astimezone(tz).utcoffset()
    while (hi - lo) > timedelta(seconds=1):  # transitions fall on whole seconds
        mid = lo + (hi - lo) / 2
        if mid.astimezone(tz).utcoffset() == after:
            hi = mid
        else:
            lo = mid
    return hi.replace(microsecond=0)


def _instant(wall: datetime, tz: ZoneInfo) -> datetime:
    """A naive wall time of `tz` as a UTC instant: the first of two, or the end of a gap."""
    first = wall.replace(tzinfo=tz, fold=0)
    as_utc = first.astimezone(UTC)
    if as_utc.astimezone(tz).replace(tzinfo=None) != wall:  # it does not exist that day
        return _gap_end(wall, tz)
    return as_utc


def _walls(expr: str, start: datetime, reverse: bool = False) -> Iterator[datetime]:
    """cronsim's matches on the naive wall clock; ends quietly at the calendar's edge."""
    try:
        yield from CronSim(expr, start, reverse=reverse)
    except ValueError:  # past year 9999 or before year 1: no more slots
        return


def slots_after(s: Schedule, after: datetime) -> Iterator[datetime]:
    """The schedule's slots strictly after `after`, in order (UTC)."""
    if s.kind == "at":
        if s.at > after:
            yield s.at
        return
    if s.kind == "every":
        k = max(0, int((after - s.anchor).total_seconds() // s.every_s))
        try:
            slot = s.anchor + timedelta(seconds=s.every_s * k)
            while True:
                if slot > after:
                    yield slot
                slot += timedelta(seconds=s.every_s)
        except OverflowError:
            return
    tz = zone(s.tz)
    last = after
    # A wall time at or before `after`'s own can still land after it only when `after` is in a
    # repeated hour's second pass, and then it lands before: starting at `after`'s wall is enough.
    try:
        for wall in _walls(s.cron, after.astimezone(tz).replace(tzinfo=None)):
            moment = _instant(wall, tz)
            if moment > last:
                last = moment
                yield moment
    except OverflowError:  # the calendar ends (year 9999): no more slots
        return


def slot_at_or_before(s: Schedule, moment: datetime) -> datetime | None:
    """The last slot at or before `moment` (UTC), or None."""
    if s.kind == "at":
        return s.at if s.at <= moment else None
    if s.kind == "every":
        if moment < s.anchor + timedelta(seconds=s.every_s):
            return None
        k = int((moment - s.anchor).total_seconds() // s.every_s)
        return s.anchor + timedelta(seconds=s.every_s * k)
    tz = zone(s.tz)
    try:
        # Wall times up to a DST shift after `moment`'s own may land at or before it (a
        # repeated hour's first pass): scan back from the latest such wall time.
        offsets = [(moment + shift).astimezone(tz).utcoffset() for shift in (-MAX_SHIFT, timedelta(0), MAX_SHIFT)]
        start = (moment + max(offsets)).replace(tzinfo=None) + timedelta(seconds=1)
        for wall in _walls(s.cron, start, reverse=True):
            found = _instant(wall, tz)
            if found <= moment:
                return found
    except OverflowError:  # the calendar's edge (year 1 or 9999)
        return None
    return None


def min_gap_s(s: Schedule, now: datetime) -> float | None:
    """The shortest gap between the next few slots (None for a one-shot)."""
    if s.kind == "at":
        return None
    if s.kind == "every":
        return float(s.every_s)
    slots = [x for _, x in zip(range(6), slots_after(s, now))]
    return min((b - a).total_seconds() for a, b in zip(slots, slots[1:])) if len(slots) > 1 else None


def check_jitter(s: Schedule, jitter_s: object, now: datetime) -> int:
    """A valid jitter: whole seconds, at most an hour and under half the gap between slots (so
    jittered fires keep their order)."""
    if isinstance(jitter_s, bool) or not isinstance(jitter_s, int) or jitter_s < 0:
        raise ScheduleError("jitter_s must be a whole number of seconds, 0 or more")
    if jitter_s > MAX_JITTER_S:
        raise ScheduleError(f"jitter_s is {jitter_s}; at most {MAX_JITTER_S} (one hour)")
    gap = min_gap_s(s, now)
    if jitter_s and gap is not None and jitter_s * 2 >= gap:
        raise ScheduleError(f"jitter_s is {jitter_s}; it must be under half the time between runs ({int(gap // 2)} s)")
    return jitter_s


def jitter(routine_id: int, slot: datetime, jitter_s: int) -> timedelta:
    """The same offset in [-jitter_s, +jitter_s] on every worker for this routine and slot."""
    if not jitter_s:
        return timedelta(0)
    digest = hashlib.sha256(f"{routine_id}:{slot.astimezone(UTC).isoformat()}".encode()).digest()
    return timedelta(seconds=int.from_bytes(digest[:8], "big") % (2 * jitter_s + 1) - jitter_s)


def next_fires(s: Schedule, start: datetime | None, count: int = 3) -> list[datetime]:
    """Up to `count` slots from `start` on (inclusive), for display; never stored."""
    if start is None:
        return []
    found = [start]
    for slot in slots_after(s, start):
        if len(found) >= count:
            break
        found.append(slot)
    return found[:count]
