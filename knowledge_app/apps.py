"""Knowledge: the owner's documents and memory, found by meaning (embeddings + words)."""

from __future__ import annotations

from functools import partial

from django.apps import AppConfig
from django.db.backends.signals import connection_created
from django.db.models.signals import post_delete, post_migrate, post_save

from navi_project.startup import server_started
from sessions_app.signals import embedding_model_changed


class KnowledgeConfig(AppConfig):
    name = "knowledge_app"
    verbose_name = "Knowledge"

    def ready(self) -> None:
        # Imported here, not at the top: these modules import models (Django's app-loading rule).
        from memory_app.models import MemoryFact
        from memory_app.search import register_meaning

        from . import indexer, search, tools, vectors, words

        connection_created.connect(vectors.load_sqlite_vec, dispatch_uid="knowledge_app.sqlite_vec")
        post_migrate.connect(words.ensure_fts_after_migrate, sender=self, dispatch_uid="knowledge_app.fts")
        post_migrate.connect(vectors.drop_orphan_tables, sender=self, dispatch_uid="knowledge_app.orphans")
        tools.register()  # knowledge_search
        register_meaning(search.facts_by_meaning)  # memory_search finds facts by meaning too
        post_save.connect(indexer.on_fact_saved, sender=MemoryFact, dispatch_uid="knowledge_app.fact_saved")
        post_delete.connect(indexer.on_fact_deleted, sender=MemoryFact, dispatch_uid="knowledge_app.fact_deleted")
        server_started.connect(indexer.resume_after_restart, dispatch_uid="knowledge_app.resume")
        # Settings → embedding model: the vectors are made again with the new one, as after a restart.
        embedding_model_changed.connect(partial(indexer.resume_after_restart, recheck=False), weak=False,
                                        dispatch_uid="knowledge_app.reembed")
