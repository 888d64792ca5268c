"""One string field of a JSON object, read while the object is still being written: the answer
of a constrained step (`{"name": "answer", "text": "…"}`) is shown as the model writes it, not
after the closing brace. The few characters before the field are scanned one by one; its value
is decoded piece by piece (agent.llm.jsonstring), never re-read."""

from __future__ import annotations

from agent.llm.jsonstring import JSONStringDecoder


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
        self._string = JSONStringDecoder()  # the field's value, once it has begun

    def feed(self, piece: str) -> str:
        if self.started:  # the usual piece: straight to the value's decoder
            shown = self._string.feed(piece)
            self.ended = self._string.closed
            return shown
        if not piece:
            return ""
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
        shown = self._string.feed(piece)
        self.ended = self._string.closed
        return shown
