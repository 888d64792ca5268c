"""Signals tools_app sends, and its reactions to other apps' signals (connected in apps.ready)."""

from __future__ import annotations

from django.db.models.signals import post_delete, post_save
from django.dispatch import Signal, receiver

from sessions_app.models import Session

from .builtin.ssh import pool as ssh_pool
from .mcp import client as mcp_client
from .models import MCPServer, ScratchpadSection, TodoList

# A user tool's file or row changed outside a tool call (an admin restore): kwargs `name`.
user_tools_changed = Signal()


@receiver(post_delete, sender=Session, dispatch_uid="tools_app.delete_session_notes")
def delete_session_notes(sender, instance: Session, **kwargs) -> None:
    """todo and scratchpad rows and pooled SSH connections are keyed by the session id (a plain
    string, no foreign key), so a deleted session would otherwise leave them behind."""
    scope = str(instance.pk)
    TodoList.objects.filter(scope=scope).delete()
    ScratchpadSection.objects.filter(scope=scope).delete()
    ssh_pool.close_session(scope)


@receiver(post_save, sender=MCPServer, dispatch_uid="tools_app.mcp_server_saved")
@receiver(post_delete, sender=MCPServer, dispatch_uid="tools_app.mcp_server_deleted")
def mcp_server_changed(sender, instance: MCPServer, **kwargs) -> None:
    """A disabled, edited or deleted server's connection in this process ends at once (a stdio
    server's process group with it); the next use connects with what the row says now."""
    mcp_client.apply_change(instance.pk, disabled=kwargs.get("signal") is post_save and not instance.enabled)
