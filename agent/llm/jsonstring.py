"""The inside of a JSON string decoded piece by piece, as a model writes it (the answer of a
constrained step, `{"name": "answer", "text": "…"}`): each piece's characters are given out as
soon as they are known. An escape a model's tokens cut in two (`\\` at the end of one piece and
`n` at the start of the next, `\\u00` then `e9`, a surrogate pair's two halves) waits only for
its own missing characters; nothing is re-read, and nothing waits for the rest of the string."""

from __future__ import annotations

import re

_SIMPLE = {"n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f", '"': '"', "\\": "\\", "/": "/"}
_SPECIAL = re.compile(r'["\\]')
_HEX = frozenset("0123456789abcdefABCDEF")
REPLACEMENT = "\ufffd"  # a lone half of a surrogate pair is no character (no encoder downstream takes it)


class JSONStringDecoder:
    """Feed the characters after a string's opening quote as they come; `feed` returns the text
    they complete. After the closing quote `closed` is true, `rest` holds what followed it in
    that piece, and later pieces are ignored. A server's broken escape never fails the text: an
    unknown `\\x` is `x`, a `\\u` without four hex digits is kept as written, a lone surrogate is
    U+FFFD."""

    __slots__ = ("_held", "closed", "rest")

    def __init__(self) -> None:
        self._held = ""  # the start of an escape cut at the end of the last piece
        self.closed = False
        self.rest = ""

    def feed(self, piece: str) -> str:
        if self._held:
            text, self._held = self._held + piece, ""
        elif "\\" not in piece and '"' not in piece and not self.closed:  # most pieces: plain characters
            return piece
        else:
            text = piece
        if self.closed or not text:
            return ""
        out, i = [], 0
        while (found := _SPECIAL.search(text, i)) is not None:
            j = found.start()
            out.append(text[i:j])
            kind = text[j + 1:j + 2]
            if text[j] == '"':
                self.closed, self.rest = True, text[j + 1:]
                return "".join(out)
            if kind and kind != "u":  # \n, \", \\ …: most escapes
                out.append(_SIMPLE.get(kind, kind))
                i = j + 2
                continue
            decoded, i = _unicode(text, j) if kind else ("", -1)
            if i < 0:  # cut short: the rest comes with the next piece
                self._held = text[j:]
                return "".join(out)
            out.append(decoded)
        out.append(text[i:])
        return "".join(out)


def _unicode(text: str, j: int) -> tuple[str, int]:
    """The `\\uXXXX` escape at text[j] (with its low half, for a surrogate pair): (its text,
    where the text after it starts), or ("", -1) when the piece ends before it is known."""
    n = len(text)
    code = _code(text, j + 2)
    if code is None:
        return "", -1
    if code < 0:  # not an escape a grammar would let through: shown as written
        return text[j:j + 2], j + 2
    if 0xDC00 <= code < 0xE000:
        return REPLACEMENT, j + 6
    if not 0xD800 <= code < 0xDC00:
        return chr(code), j + 6
    # A high surrogate: a character outside the BMP when its low half follows as `\uDC00`-`\uDFFF`.
    if j + 6 >= n or (text[j + 6] == "\\" and j + 7 >= n):
        return "", -1
    if text[j + 6:j + 8] != "\\u":
        return REPLACEMENT, j + 6
    low = _code(text, j + 8)
    if low is None:
        return "", -1
    if not 0xDC00 <= low < 0xE000:  # the next escape is read on its own
        return REPLACEMENT, j + 6
    return chr(0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00)), j + 12


def _code(text: str, at: int) -> int | None:
    """The four hex digits at text[at:]: their value, -1 when one is not a hex digit, None when
    the text ends before all four came."""
    digits = text[at:at + 4]
    if not all(c in _HEX for c in digits):
        return -1
    return int(digits, 16) if len(digits) == 4 else None
