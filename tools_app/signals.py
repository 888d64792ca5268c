"""Per-session tool data goes with its session."""

from __future__ import annotations

from django.db.models.signals import post_delete
from django.dispatch import receiver

from sessions_app.models import Session

from .models import ScratchpadSection, TodoList


@receiver(post_delete, sender=Session, dispatch_uid="tools_app.delete_session_notes")
def delete_session_notes(sender, instance: Session, **kwargs) -> None:
    """todo and scratchpad rows are scoped by the session id (a plain string, no foreign key),
    so a deleted session would otherwise leave them behind."""
    scope = str(instance.pk)
    TodoList.objects.filter(scope=scope).delete()
    ScratchpadSection.objects.filter(scope=scope).delete()
