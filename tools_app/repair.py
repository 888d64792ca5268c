"""Tool arguments from small models, repaired before they are refused.

`parse_lenient` reads almost-JSON (trailing commas, single quotes, Python literals, unquoted
keys, code fences, arguments double-encoded as a string); `coerce` fixes types the schema asks
for ("3" → 3, "true" → True, a lone value → [value]). What still fails is described by
`explain` with the exact problem, the schema of the fields involved and a corrected example.
"""

from __future__ import annotations

import ast
import json
import re
from typing import Any

_FENCE = re.compile(r"^\s*```[\w-]*\s*\n?(.*?)\n?\s*```\s*$", re.S)
_UNQUOTED_KEY = re.compile(r'([{,]\s*)([A-Za-z_][\w-]*)(\s*:)')
_PY_CONSTANTS = {"true": "True", "false": "False", "null": "None"}


class ArgumentsUnreadable(ValueError):
    """Not even lenient parsing found a JSON object; the message says what was wrong."""


def parse_lenient(raw: Any) -> tuple[dict, bool]:
    """(arguments, repaired?) from whatever the model sent; ArgumentsUnreadable otherwise."""
    if raw is None or raw == "":
        return {}, False
    if isinstance(raw, dict):
        return raw, False
    if not isinstance(raw, str):
        raise ArgumentsUnreadable(f"must be a JSON object, got {type(raw).__name__}")
    try:
        value = json.loads(raw)
        repaired = False
    except ValueError as exc:
        value = _lenient(raw)
        if value is None:
            raise ArgumentsUnreadable(f"are not valid JSON ({exc}); send a JSON object") from None
        repaired = True
    for _ in range(2):  # arguments double-encoded as a JSON string
        if isinstance(value, str):
            inner = _lenient(value) if value.strip() else None
            if inner is None:
                break
            value, repaired = inner, True
    if not isinstance(value, dict):
        raise ArgumentsUnreadable(f"must be a JSON object, got {type(value).__name__}")
    return value, repaired


def _lenient(text: str) -> Any:
    """Best effort: fences off, then JSON, then Python literals, then unquoted keys quoted."""
    fenced = _FENCE.match(text)
    if fenced:
        text = fenced.group(1)
    text = text.strip()
    for candidate in (text, _quote_keys(text)):
        try:
            return json.loads(candidate)
        except ValueError:
            pass
        try:
            return ast.literal_eval(_python_constants(candidate))
        except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError):
            pass
    return None


def _quote_keys(text: str) -> str:
    return _UNQUOTED_KEY.sub(lambda m: f'{m.group(1)}"{m.group(2)}"{m.group(3)}', text)


def _python_constants(text: str) -> str:
    # JSON's true/false/null as Python literals, outside strings only.
    out, quote, i = [], "", 0
    while i < len(text):
        ch = text[i]
        if quote:
            out.append(ch)
            if ch == "\\" and i + 1 < len(text):
                out.append(text[i + 1])
                i += 1
            elif ch == quote:
                quote = ""
        elif ch in "\"'":
            quote = ch
            out.append(ch)
        else:
            word = re.match(r"[A-Za-z_]\w*", text[i:])
            if word:
                out.append(_PY_CONSTANTS.get(word.group(0), word.group(0)))
                i += len(word.group(0))
                continue
            out.append(ch)
        i += 1
    return "".join(out)


# --- coercion by the schema -----------------------------------------------------------------
def coerce(value: Any, schema: dict) -> tuple[Any, bool]:
    """`value` with types fixed where the schema is clear; (value, changed?)."""
    if not isinstance(schema, dict):
        return value, False
    kind = schema.get("type")
    if isinstance(kind, list):  # ["string", "null"]: leave unions alone unless clearly one
        kinds = [k for k in kind if k != "null"]
        kind = kinds[0] if len(kinds) == 1 else None
    if kind == "object" and isinstance(value, str):
        parsed = _lenient(value)
        if isinstance(parsed, dict):
            return coerce(parsed, schema)[0], True
    if kind == "object" and isinstance(value, dict):
        changed = False
        props = schema.get("properties") or {}
        fixed = dict(value)
        required = set(schema.get("required") or ())
        for key, sub in props.items():
            if key not in fixed:
                continue
            if fixed[key] is None and key not in required and not _allows_null(sub):
                del fixed[key]  # an optional field sent as null means "not given"
                changed = True
                continue
            fixed[key], did = coerce(fixed[key], sub)
            changed = changed or did
        return fixed, changed
    if kind == "array":
        if isinstance(value, str):
            parsed = _lenient(value) if value.strip().startswith("[") else None
            if isinstance(parsed, list):
                value = parsed
            else:
                return [coerce(value, schema.get("items") or {})[0]], True
        elif not isinstance(value, list) and value is not None:
            return [coerce(value, schema.get("items") or {})[0]], True
        if isinstance(value, list):
            items = [coerce(v, schema.get("items") or {}) for v in value]
            return [v for v, _ in items], any(did for _, did in items)
        return value, False
    return _scalar(value, kind, schema)


def _allows_null(schema: Any) -> bool:
    if not isinstance(schema, dict) or "type" not in schema:
        return True  # untyped: null may be a real value
    kind = schema["type"]
    return kind == "null" or (isinstance(kind, list) and "null" in kind)


def _scalar(value: Any, kind: str | None, schema: dict) -> tuple[Any, bool]:
    if kind == "integer" and isinstance(value, str) and re.fullmatch(r"\s*-?\d+\s*", value):
        return int(value), True
    if kind == "integer" and isinstance(value, float) and value.is_integer():
        return int(value), True
    if kind == "number" and isinstance(value, str):
        try:
            return (int(value) if re.fullmatch(r"\s*-?\d+\s*", value) else float(value)), True
        except ValueError:
            return value, False
    if kind == "boolean" and isinstance(value, str) and value.strip().lower() in _BOOLEANS:
        return _BOOLEANS[value.strip().lower()], True
    if kind == "boolean" and isinstance(value, int) and not isinstance(value, bool) and value in (0, 1):
        return bool(value), True
    if kind == "string" and isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value), True
    return _enum_value(value, schema)


def _enum_value(value: Any, schema: dict) -> tuple[Any, bool]:
    """A string that matches an enum value but for case and surrounding spaces, as that value."""
    choices = schema.get("enum") if isinstance(schema, dict) else None
    if not isinstance(choices, list) or not isinstance(value, str) or value in choices:
        return value, False
    matches = [c for c in choices if isinstance(c, str) and c.strip().lower() == value.strip().lower()]
    return (matches[0], True) if len(matches) == 1 else (value, False)


def fold_enums(value: Any, schema: dict) -> tuple[Any, bool]:
    """`value` with every enum field (nested ones too) folded to its enum value; (value, changed?).
    Always applied, repair or not: the policy, the permission check and the tool must all read
    "Write" as "write", or one of them judges a call the other then runs differently."""
    if not isinstance(schema, dict):
        return value, False
    if isinstance(value, dict):
        props, changed, fixed = schema.get("properties") or {}, False, dict(value)
        for key, sub in props.items():
            if key in fixed:
                fixed[key], did = fold_enums(fixed[key], sub)
                changed = changed or did
        return (fixed, True) if changed else (value, False)
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        items = [fold_enums(v, schema["items"]) for v in value]
        return ([v for v, _ in items], True) if any(did for _, did in items) else (value, False)
    return _enum_value(value, schema)


_BOOLEANS = {"true": True, "yes": True, "1": True, "false": False, "no": False, "0": False}


# --- what to tell the model when it still fails ------------------------------------------------
def explain(tool_name: str, schema: dict, errors: list) -> str:
    """The exact problems, the schema of the fields involved and a corrected example."""
    props = (schema or {}).get("properties") or {}
    problems, fields = [], []
    for error in errors[:5]:
        where = "/".join(map(str, error.path))
        problems.append((f"'{where}': " if where else "") + error.message)
        field = str(error.path[0]) if error.path else None
        if field is None and error.validator == "required":
            field = _missing_field(error.message)
        if field and field in props and field not in fields:
            fields.append(field)
    lines = [f"invalid arguments for '{tool_name}': " + "; ".join(problems) + "."]
    if fields:
        lines.append("Schema of the fields involved: " + json.dumps({f: props[f] for f in fields}, ensure_ascii=False))
    lines.append(f"A valid call looks like: {tool_name}({json.dumps(example(schema), ensure_ascii=False)})")
    return "\n".join(lines)


def _missing_field(message: str) -> str | None:
    match = re.match(r"'([^']+)' is a required property", message)
    return match.group(1) if match else None


def example(schema: dict) -> dict:
    """Example arguments: every required field (and enums' first value) with a placeholder."""
    props = (schema or {}).get("properties") or {}
    required = (schema or {}).get("required") or list(props)[:1]
    return {name: _placeholder(props.get(name) or {}) for name in required}


def _placeholder(spec: dict) -> Any:
    if "enum" in spec and spec["enum"]:
        return spec["enum"][0]
    kind = spec.get("type")
    return {"integer": 1, "number": 1.5, "boolean": True, "array": ["..."], "object": {}}.get(kind, "...")
