"""A routine's turn in its chat is marked as the routine's, not the owner's words: the user row
the run starts with carries `meta.routine` = {id, name, ran_at}; the page shows "Routine 'X'
ran at 18:12" with a link to it, and the row cannot be edited as the owner's message."""

from __future__ import annotations

from datetime import datetime

from sessions_app.models import Message

from .models import Routine


def mark_turn(session_id: str, routine: Routine, started: datetime) -> None:
    """Mark the newest user row of the routine's chat (the run just added it, under its claim)."""
    row = Message.objects.filter(session_id=session_id, role=Message.Role.USER).order_by("-seq").first()
    if row is None:
        return
    row.meta = {**(row.meta or {}), "routine": {"id": routine.pk, "name": routine.name, "ran_at": started.isoformat()}}
    row.save(update_fields=["meta"])
