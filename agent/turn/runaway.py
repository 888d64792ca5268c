"""An answer that has run away: a model (a small one, often) writing the same words over and
over. The tail is watched as the answer streams; once it has repeated enough that no reader
needs more, the call is cut and one copy is kept.

A loop is a unit of 1–MAX_UNIT characters that the text ends with at least MIN_REPEATS times
in a row, over at least MIN_SPAN characters: a sentence said four times, a line of "!" a
screen wide. Lists, tables and code differ from line to line and are not loops.
"""

from __future__ import annotations

MAX_UNIT = 400  # the longest repeated unit looked for: a paragraph
MIN_REPEATS = 4
MIN_SPAN = 240  # characters the repetition must cover before it is called a loop
CHECK_EVERY = 48  # characters of new text between two looks at the tail


def repeated_tail(text: str) -> tuple[int, int] | None:
    """(unit length, times) of the shortest unit the text ends repeating as a loop, else None.
    Any suffix of a periodic text has the same period, so the tail need not end on a unit's end."""
    n = len(text)
    for unit in range(1, min(MAX_UNIT, n // MIN_REPEATS) + 1):
        if text[n - 1] != text[n - 1 - unit]:  # cheap test first: most lengths fail here
            continue
        last = text[n - unit:]
        times = 1
        while times * unit < n and text[n - (times + 1) * unit:n - times * unit] == last:
            times += 1
        if times >= MIN_REPEATS and times * unit >= MIN_SPAN:
            return unit, times
    return None


class RunawayGuard:
    """Fed an answer's text as it grows; `cut` is the text to keep once it ends in a loop."""

    def __init__(self) -> None:
        self._checked = 0
        self.cut: str | None = None

    def due(self, length: int) -> bool:
        """Whether a text of `length` characters is worth a look (`looping`): a caller that holds
        its text in pieces joins them only then, not for every piece."""
        return self.cut is not None or length - self._checked >= CHECK_EVERY

    def looping(self, text: str) -> bool:
        """True once `text` (the whole answer so far) ends in a loop; `cut` then holds it with
        the loop said once."""
        if self.cut is not None:
            return True
        if len(text) - self._checked < CHECK_EVERY:
            return False
        self._checked = len(text)
        found = repeated_tail(text)
        if found is None:
            return False
        self.cut = said_once(text, *found)
        return True


def said_once(text: str, unit: int, times: int) -> str:
    """The text with its looping tail said once: from where the repetition starts, one unit,
    then on to the end of the word the unit ends in (the tail need not start on a word)."""
    start = len(text) - times * unit
    while start > 0 and text[start - 1] == text[start - 1 + unit]:
        start -= 1
    end = start + unit
    while end < len(text) and not text[end].isspace() and end < start + 2 * unit:
        end += 1
    return text[:end].rstrip()
