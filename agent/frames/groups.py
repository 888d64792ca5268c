"""Channel-layer group names, built from ids: one place, shared by runs, sockets and approvals."""

from __future__ import annotations

from typing import Any


def frames_group(session_id: Any) -> str:
    """Every socket open on the session listens here for the frames of its runs."""
    return f"session.{session_id}"


def control_group(session_id: Any) -> str:
    """Only the process that owns the session's run listens here (stop, replay, approvals)."""
    return f"runctl.{session_id}"


def run_event(frame: dict[str, Any]) -> dict[str, Any]:
    """The channel-layer message that carries one server frame to a session's sockets."""
    return {"type": "run.event", "frame": frame}
