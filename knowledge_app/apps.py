"""Knowledge: the owner's documents and memory, found by meaning (embeddings + words)."""

from __future__ import annotations

from django.apps import AppConfig
from django.db.backends.signals import connection_created
from django.db.models.signals import post_delete, post_migrate, post_save, pre_delete

from sessions_app.signals import embedding_model_changed


class KnowledgeConfig(AppConfig):
    name = "knowledge_app"
    verbose_name = "Knowledge"

    def ready(self) -> None:
        # Imported here, not at the top: these modules import models (Django's app-loading rule).
        from jobs_app import queue, schedule
        from memory_app.models import MemoryFact
        from memory_app.search import register_meaning
        from sessions_app.backup import Part, register_part

        from . import backup_vectors, indexer, search, tasks, tools, vectors, words
        from .models import Document

        connection_created.connect(vectors.load_sqlite_vec, dispatch_uid="knowledge_app.sqlite_vec")
        post_migrate.connect(words.ensure_fts_after_migrate, sender=self, dispatch_uid="knowledge_app.fts")
        post_migrate.connect(vectors.drop_orphan_tables, sender=self, dispatch_uid="knowledge_app.orphans")
        tools.register()  # knowledge_search
        register_meaning(search.facts_by_meaning)  # memory_search finds facts by meaning too
        post_save.connect(tasks.on_fact_saved, sender=MemoryFact, dispatch_uid="knowledge_app.fact_saved")
        post_delete.connect(indexer.on_fact_deleted, sender=MemoryFact, dispatch_uid="knowledge_app.fact_deleted")
        pre_delete.connect(tasks.on_document_deleting, sender=Document, dispatch_uid="knowledge_app.document_deleting")
        register_part(Part("vectors.bin", backup_vectors.dump, backup_vectors.load))  # backups carry the vectors
        # Background work is the job workers' (jobs_app): what they check now and then.
        if tasks.queue_backfill not in indexer.backfill_queuers:
            indexer.backfill_queuers.append(tasks.queue_backfill)
        queue.on_give_up(tasks.index_document, tasks.on_gave_up)
        schedule.every(5, "knowledge: documents without a live job", tasks.sweep_documents)
        schedule.every(300, "knowledge: documents cut by an older splitter", tasks.queue_resplits)
        schedule.every(60, "knowledge: passages and facts without a vector", lambda: indexer.queue_backfill_if_needed(True))
        schedule.every(3600, "knowledge: lost vector tables", indexer.remake_lost_vector_tables)
        # Settings → embedding model: what lacks a vector of the new model is embedded again by a job.
        embedding_model_changed.connect(lambda sender=None, **kw: indexer.queue_backfill_if_needed(True), weak=False,
                                        dispatch_uid="knowledge_app.reembed")

