"""Who may use the tools that reach the host (DESIGN §8: `tools_app.run_host_tools`)."""

from __future__ import annotations

from django.contrib.auth import get_user_model


def user_has_host_tools(user_id: int | None) -> bool:
    """True when the user holds tools_app.run_host_tools (superusers hold every permission).
    Sync (ORM): call it through sync_to_async from async code."""
    if user_id is None:
        return False
    User = get_user_model()
    try:
        user = User.objects.get(pk=user_id)
    except (User.DoesNotExist, ValueError, TypeError):
        return False
    return user.has_perm("tools_app.run_host_tools")
