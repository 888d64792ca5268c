"""Versions of a turn (edit & resend, regenerate, switching back) and display-only marker rows.

Nothing is deleted and seq stays append-only. An edit or a regenerate parks the rows of the
version shown (`in_display=False, in_context=False`, their flags kept in `parked_*` and
`parked_by` = the seq of that version's user row); the run that follows appends the new user
row, linked to its turn by `version_of` (and `answer_of` for a regenerate). Selecting a version
parks the shown one the same way and gives the chosen one's rows their flags back, so the
version shown of every turn (nested ones inside a parked version too) is the state of the rows.

Why "rows from the shown version's seq on" is exactly its branch: a run appends its rows in one
block under the session's claim, and a version is always appended after the turns it follows,
so every shown row with a higher seq belongs to a later turn of the same branch. A compression
summary is never touched: it covers rows older than any version that can still be switched.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from django.db import transaction
from django.db.models import F, Max, Q
from django.utils import timezone

from .models import Message, Session

STOPPED_TEXT = "Stopped."  # the one wording of a run the owner stopped before it answered
RUN_CLAIM_TTL = timedelta(seconds=30)  # a run claim whose owner stopped heart-beating is void


class HistoryError(Exception):
    """The edit, regenerate or switch cannot be done; `status` is the HTTP status to answer with."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.message = message
        self.status = status


@dataclass(frozen=True)
class VersionLink:
    """What the next user row appended after `after_seq` becomes: a version of turn `version_of`
    (and, for a regenerate, a new answer to the user version `answer_of`)."""

    after_seq: int
    version_of: int
    answer_of: int = 0
    parked: int = 0  # the seq the replaced version was parked under


def parse_message_id(raw: object) -> int:
    """A message id from a frame or URL (an int, or a string of digits)."""
    if isinstance(raw, bool) or not isinstance(raw, (int, str)) or not str(raw).isdigit():
        raise HistoryError(f"message_id must be the integer id of one of this chat's messages, not {raw!r}", 400)
    return int(raw)


def rewind_for_edit(session_id: str, message_id: int) -> tuple[list[str], list[int], VersionLink]:
    """Park the edited user message and everything after it; return (its images, removed ids,
    the link of the new version)."""
    with transaction.atomic():
        row = Message.objects.select_for_update().filter(session_id=session_id, pk=message_id).first()
        if row is None or not row.in_display:
            raise HistoryError(f"no message {message_id} in this chat", 404)
        if row.role != Message.Role.USER or row.is_summary:
            raise HistoryError(
                f"message {message_id} is a {row.role} message; only your own messages can be edited", 400
            )
        if (row.meta or {}).get("routine"):
            raise HistoryError(
                f"message {message_id} is the instruction of routine '{row.meta['routine'].get('name', '')}', not your "
                "words; change the routine on /routines/ or send a new message",
                400,
            )
        if not row.in_context:
            raise HistoryError(
                f"message {message_id} was summarised to keep the conversation inside the model's context "
                "window, so it can no longer be edited; send a new message instead",
                400,
            )
        link = VersionLink(_last_seq(session_id), row.version_of or row.seq, parked=row.seq)
        return list(row.images or []), park_from(session_id, row.seq), link


def rewind_for_regenerate(session_id: str) -> tuple[str, list[str], list[int], VersionLink]:
    """Park the last turn (its user message included: the run appends it again); return that
    message's (content, images, removed ids, the link of the new answer version)."""
    with transaction.atomic():
        row = (
            Message.objects.select_for_update()
            .filter(session_id=session_id, role=Message.Role.USER, in_display=True, is_summary=False)
            .order_by("-seq")
            .first()
        )
        if row is None:
            raise HistoryError("nothing to regenerate: this chat has no message yet", 400)
        if not row.in_context:
            raise HistoryError("the last message was summarised and cannot be answered again; send it anew", 400)
        link = VersionLink(_last_seq(session_id), row.version_of or row.seq, row.answer_of or row.seq, parked=row.seq)
        return row.content, list(row.images or []), park_from(session_id, row.seq), link


def link_version(session_id: str, link: VersionLink) -> None:
    """Mark the user row the run just appended as the new version (the one shown). When the
    run failed before it saved the message, the replaced version is shown again instead."""
    with transaction.atomic():
        row = (
            Message.objects.filter(session_id=session_id, role=Message.Role.USER, is_summary=False, seq__gt=link.after_seq)
            .order_by("seq")
            .first()
        )
        if row is None:
            if link.parked:
                _unpark(session_id, link.parked)
            return
        row.version_of, row.answer_of, row.selected = link.version_of, link.answer_of, True
        row.save(update_fields=["version_of", "answer_of", "selected"])
        if link.answer_of:
            _answer_group(session_id, link.answer_of).exclude(pk=row.pk).update(selected=False)


def park_from(session_id: str, seq: int) -> list[int]:
    """Park every unparked row from `seq` on (the shown version starting there and its later
    turns) under `parked_by=seq`; return the ids that left the display."""
    rows = Message.objects.filter(session_id=session_id, seq__gte=seq, parked_by=0, is_summary=False)
    removed = list(rows.filter(in_display=True).order_by("seq").values_list("id", flat=True))
    # SET reads the old values on the right (SQLite and PostgreSQL alike).
    rows.update(parked_by=seq, parked_display=F("in_display"), parked_context=F("in_context"), in_display=False, in_context=False)
    return removed


def _unpark(session_id: str, seq: int) -> None:
    Message.objects.filter(session_id=session_id, parked_by=seq).update(
        in_display=F("parked_display"), in_context=F("parked_context"), parked_by=0, parked_display=False, parked_context=False
    )


def _last_seq(session_id: str) -> int:
    return Message.objects.filter(session_id=session_id).aggregate(m=Max("seq"))["m"] or 0


def _turn_versions(session_id: str, root: int) -> list[Message]:
    """Every user row of the turn whose first user row has seq `root`, oldest first."""
    return list(
        Message.objects.filter(session_id=session_id, role=Message.Role.USER, is_summary=False)
        .filter(Q(seq=root) | Q(version_of=root))
        .order_by("seq")
    )


def _answer_group(session_id: str, prompt: int):
    return Message.objects.filter(session_id=session_id, role=Message.Role.USER, is_summary=False).filter(
        Q(seq=prompt) | Q(answer_of=prompt)
    )


# --- switching versions ----------------------------------------------------------------------
def turn_user_row(session_id: str, message: Message) -> Message | None:
    """The shown user row of the turn `message` (a shown row) belongs to."""
    if message.role == Message.Role.USER and not message.is_summary:
        return message
    return (
        Message.objects.filter(session_id=session_id, role=Message.Role.USER, in_display=True, is_summary=False, seq__lt=message.seq)
        .order_by("-seq")
        .first()
    )


def select_version(session_id: str, message_id: int, n: int) -> None:
    """Show version `n` (1-based) of the turn of message `message_id`: of the user message when
    it is one, else of the turn's answer. Refused during a run (409) and for turns older than
    the compression point (400)."""
    with transaction.atomic():
        _hold_against_runs(session_id)
        message = Message.objects.filter(session_id=session_id, pk=message_id, in_display=True).first()
        if message is None:
            raise HistoryError(f"no message {message_id} shown in this chat; reload the chat and pick a shown message", 404)
        shown = turn_user_row(session_id, message)
        if shown is None:
            raise HistoryError(f"message {message_id} answers no message of yours, so it has no versions", 400)
        if message.pk == shown.pk:
            prompts = [r for r in _turn_versions(session_id, shown.version_of or shown.seq) if not r.answer_of]
            chosen = _pick(prompts, n, message_id, "versions")
            target = _answer_group(session_id, chosen.seq).order_by("-selected", "-seq").first()
        else:
            answers = list(_answer_group(session_id, shown.answer_of or shown.seq).order_by("seq"))
            target = _pick(answers, n, message_id, "answers")
            _answer_group(session_id, target.answer_of or target.seq).exclude(pk=target.pk).update(selected=False)
            Message.objects.filter(pk=target.pk).update(selected=True)
        if target.pk == shown.pk:
            return
        if not shown.in_context or not target.parked_context or target.parked_by != target.seq:
            raise HistoryError(
                f"message {message_id} is older than the summary that keeps this conversation inside the model's "
                "context window, so its versions can no longer be switched; the version shown stays",
                400,
            )
        park_from(session_id, shown.seq)
        _unpark(session_id, target.seq)


def _pick(rows: list[Message], n: int, message_id: int, what: str) -> Message:
    if len(rows) < 2:
        raise HistoryError(f"message {message_id} has no other {what}; there is nothing to switch to", 400)
    if not 1 <= n <= len(rows):
        raise HistoryError(f"message {message_id} has {len(rows)} {what}: pick a number from 1 to {len(rows)}, not {n}", 400)
    return rows[n - 1]


def _hold_against_runs(session_id: str) -> None:
    """Inside the switch's transaction: refuse (409) while a run holds the session, and hold
    the session row so that no run claims it before the switch commits."""
    stale = timezone.now() - RUN_CLAIM_TTL
    free = Q(active_run_id="") | Q(active_run_heartbeat__isnull=True) | Q(active_run_heartbeat__lt=stale)
    if not Session.objects.filter(pk=session_id).filter(free).update(active_run_heartbeat=F("active_run_heartbeat")):
        raise HistoryError("an answer is being written in this chat; wait for it to finish (or press Stop), then switch", 409)


# --- what the page shows ---------------------------------------------------------------------
def versions_of_page(session_id: str, rows: list[Message]) -> dict[int, dict]:
    """{message id: {"index", "count", "ids"}} for the shown rows of a page that have versions:
    a user message with edits, and the last row of a turn whose answer was regenerated."""
    users = [r for r in rows if r.role == Message.Role.USER and not r.is_summary]
    if rows and (not users or users[0] is not rows[0]):  # the page starts inside a turn: its answer may be here
        head = turn_user_row(session_id, rows[0])
        if head is not None:
            users.insert(0, head)
    roots = {r.version_of or r.seq for r in users if r.version_of or r.answer_of}
    roots |= set(
        Message.objects.filter(session_id=session_id, version_of__in=[r.seq for r in users]).values_list("version_of", flat=True)
    )
    if not roots:
        return {}
    group: dict[int, list[tuple[int, int, int]]] = {}
    for pk, seq, version_of, answer_of in (
        Message.objects.filter(session_id=session_id, role=Message.Role.USER, is_summary=False)
        .filter(Q(seq__in=roots) | Q(version_of__in=roots))
        .order_by("seq")
        .values_list("id", "seq", "version_of", "answer_of")
    ):
        group.setdefault(version_of or seq, []).append((pk, seq, answer_of))
    out: dict[int, dict] = {}
    for user in users:
        members = group.get(user.version_of or user.seq, [])
        prompts = [m for m in members if not m[2]]
        prompt = user.answer_of or user.seq
        if len(prompts) > 1:
            out[user.id] = _counter(prompts, prompt)
        answers = [m for m in members if m[1] == prompt or m[2] == prompt]
        if len(answers) > 1:
            last = _turn_last_row(session_id, user)
            if last is not None:
                out[last] = _counter(answers, user.seq)
    return out


def _counter(members: list[tuple[int, int, int]], seq: int) -> dict:
    seqs = [m[1] for m in members]
    return {"index": seqs.index(seq) + 1, "count": len(members), "ids": [m[0] for m in members]}


def _turn_last_row(session_id: str, user: Message) -> int | None:
    """The id of the last shown row of `user`'s turn (its answer), if it has one."""
    shown = Message.objects.filter(session_id=session_id, in_display=True, is_summary=False)
    nxt = shown.filter(role=Message.Role.USER, seq__gt=user.seq).order_by("seq").values_list("seq", flat=True).first()
    answer = shown.filter(seq__gt=user.seq)
    if nxt is not None:
        answer = answer.filter(seq__lt=nxt)
    return answer.order_by("-seq").values_list("id", flat=True).first()


def add_marker(session_id: str, kind: str, text: str) -> Message:
    """A display-only system row the page draws like the live view did (an error, a stop).
    Never in the context: the model does not see it."""
    with transaction.atomic():
        seq = (Message.objects.filter(session_id=session_id).aggregate(m=Max("seq"))["m"] or 0) + 1
        return Message.objects.create(
            session_id=session_id,
            seq=seq,
            role=Message.Role.SYSTEM,
            content=text,
            in_display=True,
            in_context=False,
            status=Message.Status.INTERRUPTED,
            meta={"kind": kind},
        )
