"""Who may run what: the `tools_app.run_host_tools` permission and which calls need it.

Host tools act on the server itself (shell, code, SSH, tool code, writing files). A user
without the permission is not offered them, and a call anyway is refused with a reason.
"""

from __future__ import annotations

from functools import lru_cache
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
    """Every run start asks (RunGuard.load). With Django's own ModelBackend the answer is one
    statement (its rules: active, and superuser or the permission directly or through a group);
    the backends' way (ORM, three queries for a plain user) cost 1.7 ms of the ~4 ms of CPU a
    routine run's start took (bench/README, routines)."""
    if user_id is None:
        return False
    from django.contrib.auth import get_user_model

    User = get_user_model()
    from django.conf import settings

    sql = _one_statement(tuple(settings.AUTHENTICATION_BACKENDS))
    if sql:
        app_label, codename = PERMISSION.split(".", 1)
        try:
            params = [hotsql.prep(User, "id", user_id), True, True, app_label, codename, app_label, codename]
            return bool(hotsql.values(sql, params))
        except (ValueError, TypeError):
            return False
    try:
        found = hotsql.select(User, "id = %s AND is_active = %s", [hotsql.prep(User, "id", user_id), True])
    except (ValueError, TypeError):
        return False
    # An active superuser has every permission (answered without the permission tables); anyone
    # else goes through the auth backends, groups included.
    return bool(found and found[0].has_perm(PERMISSION))


auser_has_host_tools = sync_to_async(user_has_host_tools)


@lru_cache(maxsize=4)
def _one_statement(backends: tuple[str, ...]) -> str:
    """ModelBackend.has_perm as one SELECT over the auth tables ("" when another backend, or a
    user model without PermissionsMixin, decides: then the backends are asked)."""
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group, Permission
    from django.contrib.contenttypes.models import ContentType
    from django.db import connection

    User = get_user_model()
    if backends != ("django.contrib.auth.backends.ModelBackend",):
        return ""
    names = {f.name for f in User._meta.get_fields()}
    if not {"is_active", "is_superuser", "user_permissions", "groups"} <= names:
        return ""
    q = connection.ops.quote_name
    user_perms = User._meta.get_field("user_permissions")
    groups = User._meta.get_field("groups")
    group_perms = Group._meta.get_field("permissions")
    perm, ctype = q(Permission._meta.db_table), q(ContentType._meta.db_table)
    named = (f"JOIN {perm} p ON p.{q('id')} = x.{{perm_col}} JOIN {ctype} ct ON ct.{q('id')} = p.{q('content_type_id')} "
             f"WHERE ct.{q('app_label')} = %s AND p.{q('codename')} = %s")
    direct = (f"SELECT 1 FROM {q(user_perms.m2m_db_table())} x "
              + named.format(perm_col=q(user_perms.m2m_reverse_name()))
              + f" AND x.{q(user_perms.m2m_column_name())} = u.{q(User._meta.pk.column)}")
    via_group = (f"SELECT 1 FROM {q(groups.m2m_db_table())} ug JOIN {q(group_perms.m2m_db_table())} x "
                 f"ON x.{q(group_perms.m2m_column_name())} = ug.{q(groups.m2m_reverse_name())} "
                 + named.format(perm_col=q(group_perms.m2m_reverse_name()))
                 + f" AND ug.{q(groups.m2m_column_name())} = u.{q(User._meta.pk.column)}")
    return (f"SELECT 1 FROM {q(User._meta.db_table)} u WHERE u.{q(User._meta.pk.column)} = %s "
            f"AND u.{q(User._meta.get_field('is_active').column)} = %s "
            f"AND (u.{q(User._meta.get_field('is_superuser').column)} = %s OR EXISTS ({direct}) OR EXISTS ({via_group}))")


def refusal(tool: str) -> str:
    """The tool result a call without the permission gets."""
    return (
        f"refused: '{tool}' acts on the server and needs the 'run host tools' permission, which this "
        "account does not have. Tell the user; the owner can grant it in the admin "
        "(Users → permissions → tools_app | run host tools). Do not retry this call."
    )
