"""Relative dates pinned to the calendar when something is kept for later.

"Dentist next Friday" on a todo list, or "my appointment is tomorrow" in memory, means another
day once the day has passed: kept as said, the item is wrong a day later. `pin` writes the date
each relative expression stands for beside it ("next Friday (2026-12-04)") the moment the item or
fact is saved, for every model. `alone` tells an item that is nothing but a date ("next Friday"):
a small model split "a todo 'dentist' for next Friday" into two items, and such a date belongs to
the item before it (`todo`'s action=set joins it there).
"""

from __future__ import annotations

import re
from datetime import date, timedelta

from django.utils import timezone

from tools_app.context import repair_fired

WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_DAY = r"(?:mon|tues|wednes|thurs|fri|satur|sun)day"  # written out: "sat" and "sun" are words too
_COUNT = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
          "eight": 8, "nine": 9, "ten": 10}
_RELATIVE = re.compile(
    r"\b(?:(?P<which>next|this|coming|this coming)\s+)?(?P<weekday>" + _DAY + r")\b(?!\s*,?\s*\d)"
    r"|\b(?P<word>the day after tomorrow|tomorrow|today|tonight|yesterday)\b(?!['\u2019])"
    r"|\bin\s+(?P<count>\d{1,3}|an?|one|two|three|four|five|six|seven|eight|nine|ten)\s+(?P<unit>days?|weeks?)\b",
    re.I,
)
_PINNED = re.compile(r"^\s*\(?\s*(?:\w{3,9},?\s+)?\d{4}-\d{2}-\d{2}")
_ISO = re.compile(r"\b\d{4}-\d{2}-\d{2}\b")
_FILLER = re.compile(r"^\W*(?:(?:for|on|by|due|until|till|before|at)\s+)?(?P<rest>.*?)\W*$", re.I | re.S)


def today() -> date:
    return timezone.localdate()


def _weekday(word: str) -> int:
    word = word.lower()
    return next(i for i, name in enumerate(WEEKDAYS) if name.startswith(word[:3]))


def resolve(match: re.Match, day: date) -> date:
    """The date one match of _RELATIVE stands for, seen from `day`. "next Friday", "Friday" and
    "on Friday" are the first Friday after `day`; "this Friday" may be `day` itself."""
    if word := match.group("word"):
        word = word.lower()
        offset = {"today": 0, "tonight": 0, "tomorrow": 1, "yesterday": -1}.get(word, 2)
        return day + timedelta(days=offset)
    if count := match.group("count"):
        n = int(count) if count.isdigit() else _COUNT[count.lower()]
        return day + timedelta(days=n * (7 if match.group("unit").lower().startswith("week") else 1))
    target = _weekday(match.group("weekday"))
    ahead = (target - day.weekday()) % 7
    which = (match.group("which") or "").lower()
    if ahead == 0 and which != "this":
        ahead = 7
    return day + timedelta(days=ahead)


def pin(text: str, day: date | None = None, weekdays: bool = True) -> str:
    """`text` with the date of each relative expression written after it ("next Friday
    (2026-12-04)"); unchanged when it already holds a date written out (2026-12-04). A weekday
    alone ("call Bob Monday") is pinned only with `weekdays` (a todo item: a day to come), never
    after "every" or "each"; in a fact "my gym days are Monday and Thursday" is a habit, so
    memory pins "next Monday", "tomorrow" and such only."""
    if not isinstance(text, str) or not text or _ISO.search(text):
        return text
    day = day or today()
    out, last = [], 0
    for match in _RELATIVE.finditer(text):
        if _PINNED.match(text[match.end():]):
            continue
        if match.group("weekday") and not match.group("which"):
            before = text[:match.start()]
            if not weekdays or re.search(r"\b(?:every|each)\s+(?:\w+\s+)?$", before, re.I):
                continue
        out.append(text[last:match.end()])
        out.append(f" ({resolve(match, day).isoformat()})")
        last = match.end()
    if not out:
        return text
    out.append(text[last:])
    return "".join(out)


def alone(item: str) -> bool:
    """An item that is only a date ("next Friday", "for tomorrow", "on Monday (2026-11-30)")."""
    rest = _FILLER.match(item or "").group("rest")
    rest = _ISO.sub("", rest).strip(" ()-,.")
    match = _RELATIVE.fullmatch(rest)
    return bool(match) or (not rest and bool(_ISO.search(item or "")))


def with_dates(items: list[str], day: date | None = None, join: bool = True) -> list[str]:
    """Todo items with their relative dates pinned, an item that is only a date joined to the
    item before it ("dentist", "next Friday" → "dentist, next Friday (2026-12-04)"); more dates
    right after it are dropped (a 0.5B model went on with "next Monday", "next Tuesday", … the
    clock's days). Without `join` (a big model's profile: the "dates" repair group) each item is
    only pinned."""
    if not join:
        return [pin(item, day) for item in items]
    joined: list[str] = []
    after_date = False  # the item before was a date joined to its task
    for item in items:
        if joined and alone(item):
            if not after_date:  # more dates in a row are the clock's days copied, not tasks
                joined[-1] = f"{joined[-1].rstrip(' ,.;')}, {_FILLER.match(item).group('rest')}"
            after_date = True
        else:
            joined.append(item)
            after_date = False
    if len(joined) < len(items):  # an item joined to its date, or the clock's days dropped
        repair_fired("dates")
    return [pin(item, day) for item in joined]
