"""A turn that began as speech is marked so: the user row the run starts with carries
`meta.voice` = {source, duration_s}; the page shows "🎤 from a voice note" above it."""

from __future__ import annotations

from sessions_app.models import Message


def mark_voice_turn(session_id: str, source: str, duration_s: float | None) -> None:
    """Mark the newest user row of the chat (the run just added it, under its claim)."""
    row = Message.objects.filter(session_id=session_id, role=Message.Role.USER).order_by("-seq").first()
    if row is None:
        return
    voice = {"source": source, "duration_s": round(duration_s, 1) if duration_s is not None else None}
    row.meta = {**(row.meta or {}), "voice": voice}
    row.save(update_fields=["meta"])
