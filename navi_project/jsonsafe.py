"""Numbers JSON cannot hold (NaN, Infinity, 1e309 read as infinity): found, refused or made text.

Python's `json` reads and writes them, but they are not JSON: SQLite's JSON_VALID check refuses
the row (one such tool call once aborted a whole run) and PostgreSQL's jsonb refuses the value.
Every JSON field goes through `finite` on its way to the database (`install`, at start and for
each new connection's backend); readers of outside JSON refuse such numbers with `non_finite` or `loads`.
Walks use a stack, never recursion: a value nested 100 000 deep is handled like a flat one.
"""

from __future__ import annotations

import json
import math
from typing import Any

_NAMES = {math.inf: "Infinity", -math.inf: "-Infinity"}


class NonFiniteNumber(ValueError):
    """A JSON text or value holds NaN or an infinity; the message says where."""


def _bad(value: Any) -> bool:
    return isinstance(value, float) and not math.isfinite(value)


def _name(value: float) -> str:
    return _NAMES.get(value, "NaN")


def non_finite(value: Any) -> str | None:
    """The path of the first NaN or infinity in `value` (`a[1].b`; "" for the value itself),
    or None when it holds none."""
    stack: list[tuple[Any, str]] = [(value, "")]
    while stack:
        item, path = stack.pop()
        if _bad(item):
            return path
        if isinstance(item, dict):
            stack.extend((v, f"{path}.{k}" if path else str(k)) for k, v in reversed(list(item.items())))
        elif isinstance(item, (list, tuple)):
            stack.extend((v, f"{path}[{i}]") for i, v in reversed(list(enumerate(item))))
    return None


def finite(value: Any) -> Any:
    """`value` with every NaN or infinity replaced by its name as a string ("NaN", "Infinity",
    "-Infinity"); the same object when it holds none (the common case costs one walk)."""
    if non_finite(value) is None:
        return value
    root: list[Any] = [None]
    stack: list[tuple[Any, Any, Any]] = [(value, root, 0)]  # (source, parent copy, key in it)
    while stack:
        item, parent, key = stack.pop()
        if _bad(item):
            parent[key] = _name(item)
        elif isinstance(item, dict):
            copy: Any = {}
            parent[key] = copy
            stack.extend((v, copy, k) for k, v in item.items())
        elif isinstance(item, (list, tuple)):
            copy = [None] * len(item)
            parent[key] = copy
            stack.extend((v, copy, i) for i, v in enumerate(item))
        else:
            parent[key] = item
    return root[0]


def describe(path: str, value: Any = None) -> str:
    """Words for the model or a client: where the number is and what to send instead."""
    where = f" at {path}" if path else ""
    return (f"a number{where} is not a finite number (1e309, NaN or Infinity); JSON cannot hold it. "
            "Send an ordinary number such as 3600, or a string")


def _refuse_constant(name: str) -> Any:
    raise NonFiniteNumber(f"{name} is not a finite number; JSON cannot hold it. Send an ordinary number or a string")


def _finite_float(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):
        raise NonFiniteNumber(f"{text} is not a finite number (too large: it reads as infinity); send an ordinary "
                              "number or a string")
    return number


def loads(text: str | bytes) -> Any:
    """`json.loads` that refuses NaN, Infinity and numbers too large for a float (NonFiniteNumber,
    a ValueError)."""
    return json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float)


def install(connection: Any) -> None:
    """Make every JSON value written through this connection's backend finite: the one place all
    JSON fields pass on their way in (ORM saves, updates and hotsql alike). Patched on the
    backend's operations class, so every connection of every thread has it from its first
    statement (a statement's values are prepared before the connection opens)."""
    ops = type(connection.ops)
    if ops.__dict__.get("_navi_finite_json", False):
        return
    adapt = ops.adapt_json_value

    def adapt_json_value(self: Any, value: Any, encoder: Any) -> Any:
        return adapt(self, finite(value), encoder)

    ops.adapt_json_value = adapt_json_value
    ops._navi_finite_json = True


def on_connection_created(sender: Any, connection: Any, **kwargs: Any) -> None:
    install(connection)
