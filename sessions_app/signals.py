"""Signals sessions_app sends. Deleting a session is Django's own `post_delete` of Session."""

from __future__ import annotations

import logging

from django.dispatch import Signal

log = logging.getLogger(__name__)

# A chat session was created through the API (after the transaction committed); kwargs: session.
# Receivers must not block: long work belongs in a background thread or task.
session_created = Signal()

# The owner chose another embedding model in Settings (after the transaction committed): the
# vectors of the old one are made again with the new one. No kwargs.
embedding_model_changed = Signal()


def send_session_created(session) -> None:
    """Tell the receivers; one that raises is logged and never breaks session creation."""
    for receiver, result in session_created.send_robust(sender=type(session), session=session):
        if isinstance(result, Exception):
            log.error("session_created receiver %r failed", receiver, exc_info=result)
