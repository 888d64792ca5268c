"""Who may run what: the `tools_app.run_host_tools` permission and which calls need it.

Host tools act on the server itself (shell, code, SSH, tool code, writing files). A user
without the permission is not offered them, and a call anyway is refused with a reason.
"""

from __future__ import annotations

from typing import Any

from asgiref.sync import sync_to_async

from navi_project import hotsql

PERMISSION = "tools_app.run_host_tools"
HOST_TOOLS = frozenset(
    {"terminal", "code_exec", "ssh_exec", "write_tool", "delete_tool", "reload_tools", "test_tool"}
)
# filesystem actions that change files; reads, lists and searches are not host calls.
FILESYSTEM_READS = frozenset({"read", "list", "search"})
SAFE_HTTP_METHODS = frozenset({"GET", "HEAD"})


def is_host_call(tool: str, arguments: Any) -> bool:
    """Does this call act on the server (needs the permission, `ask` by default)?"""
    if tool in HOST_TOOLS:
        return True
    if tool == "filesystem":
        if not isinstance(arguments, dict):  # unreadable arguments: judge the worst case
            return True
        # Arguments arrive normalised (tools_app.registry.prepare); anything that is not exactly
        # a read is judged as a change, so no spelling of "write" can pass as harmless.
        return arguments.get("action") not in FILESYSTEM_READS
    return False


def offered_without_permission(tool: str) -> bool:
    """Tools a user without the permission is still offered (filesystem: for reading)."""
    return tool not in HOST_TOOLS


def user_has_host_tools(user_id: int | None) -> bool:
    if user_id is None:
        return False
    from django.contrib.auth import get_user_model

    User = get_user_model()
    try:
        found = hotsql.select(User, "id = %s AND is_active = %s", [hotsql.prep(User, "id", user_id), True])
    except (ValueError, TypeError):
        return False
    # An active superuser has every permission (answered without the permission tables); anyone
    # else goes through the auth backends, groups included.
    return bool(found and found[0].has_perm(PERMISSION))


auser_has_host_tools = sync_to_async(user_has_host_tools)


def refusal(tool: str) -> str:
    """The tool result a call without the permission gets."""
    return (
        f"refused: '{tool}' acts on the server and needs the 'run host tools' permission, which this "
        "account does not have. Tell the user; the owner can grant it in the admin "
        "(Users → permissions → tools_app | run host tools). Do not retry this call."
    )
