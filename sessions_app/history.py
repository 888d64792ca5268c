"""Rewriting the end of a chat (edit & resend, regenerate) and display-only marker rows.

Nothing is deleted and seq stays append-only: the rows of the turns that are replaced leave the
display and the context (`in_display=False, in_context=False`), and the run that follows
appends the new user row and answer. A compression summary is never touched: it only covers
rows older than any message that can still be edited.
"""

from __future__ import annotations

from django.db import transaction
from django.db.models import Max

from .models import Message

STOPPED_TEXT = "Stopped."  # the one wording of a run the owner stopped before it answered


class HistoryError(Exception):
    """The edit or regenerate cannot be done; `status` is the HTTP status to answer with."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.message = message
        self.status = status


def parse_message_id(raw: object) -> int:
    """A message id from a frame or URL (an int, or a string of digits)."""
    if isinstance(raw, bool) or not isinstance(raw, (int, str)) or not str(raw).isdigit():
        raise HistoryError(f"message_id must be the integer id of one of this chat's messages, not {raw!r}", 400)
    return int(raw)


def rewind_for_edit(session_id: str, message_id: int) -> tuple[list[str], list[int]]:
    """Drop the edited user message and everything after it; return (its images, removed ids)."""
    with transaction.atomic():
        row = Message.objects.select_for_update().filter(session_id=session_id, pk=message_id).first()
        if row is None or not row.in_display:
            raise HistoryError(f"no message {message_id} in this chat", 404)
        if row.role != Message.Role.USER or row.is_summary:
            raise HistoryError(
                f"message {message_id} is a {row.role} message; only your own messages can be edited", 400
            )
        if not row.in_context:
            raise HistoryError(
                f"message {message_id} was summarised to keep the conversation inside the model's context "
                "window, so it can no longer be edited; send a new message instead",
                400,
            )
        return list(row.images or []), _hide_from(session_id, row.seq)


def rewind_for_regenerate(session_id: str) -> tuple[str, list[str], list[int]]:
    """Drop the last turn (its user message included: the run appends it again); return that
    message's (content, images, removed ids)."""
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
        return row.content, list(row.images or []), _hide_from(session_id, row.seq)


def _hide_from(session_id: str, seq: int) -> list[int]:
    rows = Message.objects.filter(session_id=session_id, seq__gte=seq, is_summary=False)
    removed = list(rows.filter(in_display=True).order_by("seq").values_list("id", flat=True))
    rows.update(in_display=False, in_context=False)
    return removed


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
