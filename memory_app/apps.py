"""Memory app: facts, summaries and their search index. The LLM work on memory (extraction,
summary regeneration) is the agent's (agent.memory.extraction, agent.memory.background)."""

from __future__ import annotations

from django.apps import AppConfig
from django.db.models.signals import post_migrate


class MemoryAppConfig(AppConfig):
    name = "memory_app"
    verbose_name = "Memory"

    def ready(self) -> None:
        from .search import ensure_fts_after_migrate  # imports models: only once apps are ready

        post_migrate.connect(ensure_fts_after_migrate, sender=self, dispatch_uid="memory_app_ensure_fts")
