"""Each user's own workspace folder."""

from __future__ import annotations

from pathlib import Path

from django.conf import settings

from tools_app.context import current_user_id


def workspace_for(user_id: int | None = None) -> Path:
    """NAVI_WORKSPACE/<user id> during a run; NAVI_WORKSPACE itself with no user in context."""
    user_id = user_id if user_id is not None else current_user_id.get()
    root = Path(settings.NAVI_WORKSPACE)
    return root / str(int(user_id)) if user_id is not None else root
