"""Export a chat (Markdown to read, JSON to keep) and import the JSON back as a new chat.

The JSON is full fidelity: every message row with all its fields (seq, flags, thinking, tool
calls, images, meta), so export → import → export gives the same messages. Uploaded files are
listed by name only; their bytes stay on the server.
"""

from __future__ import annotations

import json
from datetime import datetime
from datetime import timezone as dt_timezone
from typing import Any

from django.conf import settings
from django.db import connections, transaction
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from django.utils.text import slugify

from .models import Message, Session, UserSettings, profile_model

FORMAT = "navi.session"
VERSION = 1
MAX_MESSAGES = 100_000
_MESSAGE_FIELDS = (
    "seq",
    "role",
    "content",
    "thinking",
    "images",
    "tool_calls",
    "tool_call_id",
    "name",
    "is_summary",
    "in_display",
    "in_context",
    "status",
    "meta",
    # Versions of a turn (sessions_app.history): kept, so an import can switch them as before.
    "version_of",
    "answer_of",
    "selected",
    "parked_by",
    "parked_display",
    "parked_context",
)


class ImportError_(ValueError):  # noqa: N801 - not the builtin ImportError
    """The uploaded JSON is not a Navi export; the message says what is wrong."""


# --- export ---------------------------------------------------------------------------------
def filename(session: Session, ext: str) -> str:
    base = slugify(session.title)[:60] or "chat"
    return f"navi-{base}-{str(session.id)[:8]}.{ext}"


def message_dict(m: Message) -> dict:
    out = {"id": m.id}
    out.update({f: getattr(m, f) for f in _MESSAGE_FIELDS})
    out["created_at"] = m.created_at.isoformat()
    return out


def export_json(session: Session) -> dict:
    return {
        "format": FORMAT,
        "version": VERSION,
        "exported_at": timezone.now().isoformat(),
        "session": {
            "id": str(session.id),
            "title": session.title,
            "title_source": session.title_source,
            "profile_id": session.profile_id,
            "pinned": session.pinned,
            "created_at": session.created_at.isoformat(),
            "last_active": session.last_active.isoformat(),
            "context_token_count": session.context_token_count,
        },
        "messages": [message_dict(m) for m in session.messages.order_by("seq")],
        "files": [
            {"name": f.name, "size": f.size, "published": f.published, "created_at": f.created_at.isoformat()}
            for f in session.files.all()
        ],
    }


def _fence(text: str, lang: str = "") -> str:
    """A code fence longer than any backtick run inside `text`."""
    longest, run = 0, 0
    for ch in text:
        run = run + 1 if ch == "`" else 0
        longest = max(longest, run)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{lang}\n{text}\n{fence}"


def _details(summary: str, body: str) -> str:
    return f"<details><summary>{summary}</summary>\n\n{body}\n\n</details>\n"


def export_markdown(session: Session) -> str:
    """The chat as the page shows it: title, messages, thinking and tool calls folded away."""
    profile = session.profile
    lines = [
        f"# {session.title or 'Chat'}",
        "",
        f"*Navi chat with {profile.name} ({profile.id}), started {session.created_at:%Y-%m-%d %H:%M} UTC.*",
        "",
    ]
    for m in session.messages.filter(in_display=True).order_by("seq"):
        lines.extend(_markdown_message(m))
    return "\n".join(lines).rstrip() + "\n"


def _markdown_message(m: Message) -> list[str]:
    when = f"{m.created_at:%Y-%m-%d %H:%M}"
    if m.role == "user":
        out = [f"## You — {when}", "", m.content]
        if m.images:
            out += ["", f"*({len(m.images)} image{'s' if len(m.images) != 1 else ''} attached)*"]
        return out + [""]
    if m.role == "system":
        kind = (m.meta or {}).get("kind", "note")
        return [f"> **{kind.capitalize()}:** {m.content}", ""]
    if m.role == "tool":
        out = [_details(f"Result of {m.name or 'tool'}", _fence(m.content))]
        for sub in (m.meta or {}).get("subagent", []):
            out.append(_details(f"Sub-agent called {sub.get('tool')}", _fence(str(sub.get("result", "")))))
        for f in (m.meta or {}).get("files", []):
            out.append(f"Published file: [{f.get('name')}]({f.get('url')})\n")
        for fact in (m.meta or {}).get("memory", []):
            out.append(f"*Remembered {fact.get('category')}: {fact.get('key')} = {fact.get('value')}*\n")
        return out
    out = [f"## Navi — {when}" + (" (plan)" if m.name == "plan" else ""), ""]
    if m.thinking:
        out.append(_details("Thinking", m.thinking))
    if m.content:
        out += [m.content, ""]
    if sources := (m.meta or {}).get("sources"):
        out += ["Sources: " + "; ".join(_source_md(s) for s in sources if isinstance(s, dict)), ""]
    for call in m.tool_calls or []:
        args = call.get("arguments")
        text = args if isinstance(args, str) else json.dumps(args, indent=2, ensure_ascii=False)
        out.append(_details(f"Tool call: {call.get('name', '?')}", _fence(text, "json")))
    if m.status == Message.Status.INTERRUPTED:
        out += ["*(interrupted)*", ""]
    return out


def _source_md(source: dict) -> str:
    """A passage an answer cites, in code spans: an uploaded file's name and headings are not Markdown to render."""
    name, where = (str(source.get(k) or "").replace("`", "'") for k in ("name", "where"))
    return f"`{name}`" + (f" (`{where}`)" if where else "")


# --- import ---------------------------------------------------------------------------------
def _check(cond: bool, message: str) -> None:
    if not cond:
        raise ImportError_(message)


def _time(value, where: str, now: datetime | None = None) -> datetime:
    if value is None:
        return now or timezone.now()
    parsed = parse_datetime(value) if isinstance(value, str) else None
    _check(parsed is not None, f"{where} must be an ISO 8601 date-time")
    return parsed if timezone.is_aware(parsed) else timezone.make_aware(parsed, dt_timezone.utc)


def _str(value, where: str, limit: int | None = None, default: str = "") -> str:
    if value is None:
        return default
    _check(isinstance(value, str), f"{where} must be a string")
    _check(limit is None or len(value) <= limit, f"{where} is longer than {limit} characters")
    return value


def _bool(value, where: str, default: bool) -> bool:
    if value is None:
        return default
    _check(isinstance(value, bool), f"{where} must be true or false")
    return value


_ROLES = frozenset(Message.Role.values)  # enum `.values` builds a new list on every access
_STATUSES = frozenset(Message.Status.values)
_ROLE_NAMES = ", ".join(Message.Role.values)
_STATUS_NAMES = ", ".join(Message.Status.values)
_INSERT_COLUMNS = ("session", *_MESSAGE_FIELDS, "created_at")
_JSON_FIELDS = frozenset({"images", "tool_calls", "meta", "created_at"})  # prepared by their field
INSERT_BATCH = 1500  # rows per INSERT statement (SQLite allows 32 766 parameters: 21 a row)


def _message(raw, i: int, now: datetime) -> tuple:
    """One exported message, checked, as the values of `_MESSAGE_FIELDS` + created_at."""
    where = f"messages[{i}]"
    _check(isinstance(raw, dict), f"{where} must be an object")
    seq = raw.get("seq")
    _check(type(seq) is int and seq > 0, f"{where}.seq must be a positive integer")
    role = raw.get("role")
    _check(isinstance(role, str) and role in _ROLES, f"{where}.role must be one of {_ROLE_NAMES}")
    status = raw.get("status") or Message.Status.COMPLETE
    _check(isinstance(status, str) and status in _STATUSES, f"{where}.status must be one of {_STATUS_NAMES}")
    images = raw.get("images") or []
    _check(
        isinstance(images, list) and all(isinstance(x, str) for x in images),
        f"{where}.images must be a list of base64 strings",
    )
    calls = raw.get("tool_calls") or []
    _check(
        isinstance(calls, list) and all(isinstance(c, dict) and isinstance(c.get("name"), str) for c in calls),
        f"{where}.tool_calls must be a list of objects with a name",
    )
    meta = raw.get("meta") or {}
    _check(isinstance(meta, dict), f"{where}.meta must be an object")
    return (
        seq,
        role,
        _str(raw.get("content"), f"{where}.content"),
        _str(raw.get("thinking"), f"{where}.thinking"),
        images,
        calls,
        _str(raw.get("tool_call_id"), f"{where}.tool_call_id", 100),
        _str(raw.get("name"), f"{where}.name", 100),
        _bool(raw.get("is_summary"), f"{where}.is_summary", False),
        _bool(raw.get("in_display"), f"{where}.in_display", True),
        _bool(raw.get("in_context"), f"{where}.in_context", True),
        # Nothing streams into an imported chat: an answer cut off mid-stream is interrupted.
        Message.Status.INTERRUPTED.value if status == Message.Status.PARTIAL else str(status),
        meta,
        _seq_ref(raw.get("version_of"), f"{where}.version_of"),
        _seq_ref(raw.get("answer_of"), f"{where}.answer_of"),
        _bool(raw.get("selected"), f"{where}.selected", True),
        _seq_ref(raw.get("parked_by"), f"{where}.parked_by"),
        _bool(raw.get("parked_display"), f"{where}.parked_display", False),
        _bool(raw.get("parked_context"), f"{where}.parked_context", False),
        _time(raw.get("created_at"), f"{where}.created_at", now),
    )


def _seq_ref(value, where: str) -> int:
    """A version field: the seq of another message, 0 for none (an older export has none)."""
    if value is None:
        return 0
    _check(type(value) is int and value >= 0, f"{where} must be the seq of a message of this export, or 0")
    return value


def import_json(user, data) -> Session:
    """A new chat owned by `user` from an export; raises ImportError_ on anything malformed."""
    _check(isinstance(data, dict), "the body must be a JSON object (a Navi JSON export)")
    _check(data.get("format") == FORMAT, f'not a Navi export: "format" must be "{FORMAT}"')
    _check(
        data.get("version") == VERSION,
        f"unsupported export version {data.get('version')!r}; this Navi reads version {VERSION}",
    )
    meta = data.get("session")
    _check(isinstance(meta, dict), '"session" must be an object')
    raw_messages = data.get("messages")
    _check(isinstance(raw_messages, list), '"messages" must be a list')
    _check(len(raw_messages) <= MAX_MESSAGES, f"too many messages (the limit is {MAX_MESSAGES})")
    now = timezone.now()
    messages = [_message(raw, i, now) for i, raw in enumerate(raw_messages)]
    seqs = {m[0] for m in messages}
    _check(len(seqs) == len(messages), "message seq values must be unique")
    for name in ("version_of", "answer_of", "parked_by"):
        at = _MESSAGE_FIELDS.index(name)
        bad = next((i for i, m in enumerate(messages) if m[at] and m[at] not in seqs), None)
        _check(bad is None, f"messages[{bad}].{name} names no message of this export; use the seq of one, or 0")
    title_source = _str(meta.get("title_source"), "session.title_source", 8)
    _check(title_source in ("", "model", "user"), 'session.title_source must be "", "model" or "user"')
    title = _str(meta.get("title"), "session.title", 200).strip()
    session = Session(
        owner=user,
        profile=_profile_for(user, meta.get("profile_id")),
        # Marked, so it is not taken for the chat it was exported from; and listed first (it is
        # what the owner just did), its own dates kept in the export's created_at.
        title=f"{title[:200 - len(IMPORTED)]}{IMPORTED}" if title else "Imported chat",
        title_source="user",
        pinned=_bool(meta.get("pinned"), "session.pinned", False),
        created_at=_time(meta.get("created_at"), "session.created_at"),
        last_active=now,
        context_token_count=_count(meta.get("context_token_count")),
    )
    messages.sort(key=lambda m: m[0])
    with transaction.atomic():
        session.save()
        _insert_messages(session, messages)
    return session


IMPORTED = " (imported)"


def _insert_messages(session: Session, messages: list[tuple]) -> None:
    """INSERT the rows in batches, one statement each: the ORM's bulk_create compiled every
    value of every row through its field (15 a row: ~2/3 of a 100 000-message import)."""
    connection = connections[Message.objects.db]
    fields = [Message._meta.get_field(name) for name in _INSERT_COLUMNS]
    session_id = fields[0].get_db_prep_save(session.pk, connection)
    # Values that need their field's preparation (JSON, datetimes): positions in a row.
    prepared = [(i, fields[i + 1]) for i, name in enumerate(_INSERT_COLUMNS[1:]) if name in _JSON_FIELDS]
    # Most rows have no images, tool calls or meta: their empty value is prepared once.
    empty = {i: field.get_db_prep_save(field.get_default(), connection) for i, field in prepared if field.name != "created_at"}
    quote = connection.ops.quote_name
    columns = ", ".join(quote(f.column) for f in fields)
    row_sql = "(" + ", ".join(["%s"] * len(fields)) + ")"
    with connection.cursor() as cursor:
        for start in range(0, len(messages), INSERT_BATCH):
            batch = messages[start : start + INSERT_BATCH]
            params: list = []
            for m in batch:
                row = list(m)
                for i, field in prepared:
                    value = row[i]
                    row[i] = empty[i] if i in empty and not value else field.get_db_prep_save(value, connection)
                params.append(session_id)
                params.extend(row)
            sql = f"INSERT INTO {quote(Message._meta.db_table)} ({columns}) VALUES " + ", ".join([row_sql] * len(batch))
            cursor.execute(sql, params)


def _count(value) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def _profile_for(user, profile_id) -> Any:
    """The exported profile when it exists here, else the user's default, else the first."""
    if isinstance(profile_id, str):
        profile = profile_model().objects.filter(pk=profile_id).first()
        if profile is not None:
            return profile
    return default_profile(user)


def default_profile(user) -> Any:
    chosen = UserSettings.objects.filter(user=user).values_list("default_profile_id", flat=True).first()
    for pid in (chosen, settings.NAVI_DEFAULT_PROFILE):
        if pid:
            profile = profile_model().objects.filter(pk=pid).first()
            if profile is not None:
                return profile
    profile = profile_model().objects.order_by("id").first()
    if profile is None:
        raise ImportError_("no agent profiles exist; run `python manage.py migrate`")
    return profile
