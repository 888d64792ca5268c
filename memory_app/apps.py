"""Memory app. Its ready() wires the hooks this part of Navi provides, explicitly and in one
place: the memory summary provider, extraction on session creation, the context-compression
workers, the session-files cleanup loop, and the FTS index after migrate."""

from __future__ import annotations

from django.apps import AppConfig
from django.db.models.signals import post_migrate


def _ensure_fts(sender, using="default", **kwargs) -> None:
    from django.db import connections

    from .search import ensure_fts

    ensure_fts(connections[using])


class MemoryAppConfig(AppConfig):
    name = "memory_app"
    verbose_name = "Memory"

    def ready(self) -> None:
        from agent import compression, prompts
        from navi_project import startup
        from sessions_app import cleanup
        from sessions_app import services as session_services

        from . import background, services

        prompts.memory_summary_provider = services.summary_provider
        if background.on_session_created not in session_services.session_created_hooks:
            session_services.session_created_hooks.append(background.on_session_created)
        compression.register_workers()
        if cleanup.start_cleanup_loop not in startup.startup_hooks:
            startup.startup_hooks.append(cleanup.start_cleanup_loop)
        post_migrate.connect(_ensure_fts, sender=self, dispatch_uid="memory_app_ensure_fts")
