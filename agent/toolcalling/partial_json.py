"""One string field of a JSON object, read while the object is still being written: the answer
of a constrained step (`{"name": "answer", "text": "…"}`) is shown as the model writes it, not
after the closing brace."""

from __future__ import annotations

_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f", '"': '"', "\\": "\\", "/": "/"}


class FieldText:
    """Feed the JSON text as it comes; `feed` returns the newly decoded part of the top-level
    field `key`'s string value ("" until it starts and after it ends)."""

    def __init__(self, key: str = "text") -> None:
        self.key = key
        self.started = False  # the field's value has begun
        self.ended = False
        self._depth = 0
        self._in_string = False
        self._escaped = False
        self._token: list[str] = []
        self._last_key: str | None = None
        self._value_next = False  # after a ':' at the top level: the next string is a value
        self._pending = ""  # an escape sequence cut between two pieces

    def feed(self, piece: str) -> str:
        if self.ended or not piece:
            return ""
        if self.started:
            return self._value(piece)
        for i, ch in enumerate(piece):  # only the few characters before the field: `{"name":"answer","text":"`
            if self._in_string:
                if self._escaped:
                    self._escaped = False
                    self._token.append(ch)
                elif ch == "\\":
                    self._escaped = True
                elif ch == '"':
                    self._in_string = False
                    if self._depth == 1 and not self._value_next:
                        self._last_key = "".join(self._token)
                else:
                    self._token.append(ch)
            elif ch == '"':
                if self._depth == 1 and self._value_next and self._last_key == self.key:
                    self.started = True
                    return self._value(piece[i + 1:])
                self._in_string, self._token = True, []
            elif ch in "{[":
                self._depth += 1
            elif ch in "}]":
                self._depth -= 1
            elif ch == ":" and self._depth == 1:
                self._value_next = True
            elif ch == "," and self._depth == 1:
                self._value_next = False
        return ""

    def _value(self, piece: str) -> str:
        text = self._pending + piece
        self._pending = ""
        if '"' not in text and "\\" not in text:  # most pieces: plain characters
            return text
        out, i, n = [], 0, len(text)
        while i < n:
            quote, slash = text.find('"', i), text.find("\\", i)
            j = min(k for k in (quote, slash) if k >= 0) if quote >= 0 or slash >= 0 else -1
            if j < 0:
                out.append(text[i:])
                break
            out.append(text[i:j])
            if j == quote:
                self.ended = True
                break
            if j + 1 >= n:
                self._pending = text[j:]
                break
            kind = text[j + 1]
            if kind != "u":
                out.append(_ESCAPES.get(kind, kind))
                i = j + 2
                continue
            if j + 6 > n:
                self._pending = text[j:]
                break
            try:
                code = int(text[j + 2:j + 6], 16)
            except ValueError:
                out.append(text[j:j + 6])
                i = j + 6
                continue
            if 0xD800 <= code < 0xDC00:  # a character outside the BMP: two escapes
                if j + 12 > n:
                    self._pending = text[j:]
                    break
                try:
                    low = int(text[j + 8:j + 12], 16) if text[j + 6:j + 8] == "\\u" else -1
                except ValueError:
                    low = -1
                if 0xDC00 <= low < 0xE000:
                    out.append(chr(0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00)))
                    i = j + 12
                    continue
            # A lone half of a pair is no character (and no encoder downstream would take it).
            out.append("\ufffd" if 0xD800 <= code < 0xE000 else chr(code))
            i = j + 6
        return "".join(out)
