"""The owner's documents, their passages, and which embedding space each vector is in.

Vectors themselves live in the database's own vector index (`vectors.py`: a sqlite-vec table
in the same SQLite file, or a pgvector table with an HNSW index), one table per space: a
space is one embedding model and its dimension, so vectors of two models never mix.
"""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models
from django.utils import timezone

NAME_MAX = 255
STATUSES = ("queued", "indexing", "ready", "failed")


class VectorSpace(models.Model):
    """One embedding model and the dimension of its vectors; each has its own vector tables."""

    model = models.CharField(max_length=200)
    dim = models.PositiveIntegerField()
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["model", "dim"], name="vectorspace_unique_model_dim")]

    def __str__(self) -> str:
        return f"{self.model} ({self.dim})"


class Document(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="knowledge_documents")
    name = models.CharField(max_length=NAME_MAX)
    kind = models.CharField(max_length=16)  # text, markdown, html, pdf, docx
    sha256 = models.CharField(max_length=64)
    size = models.BigIntegerField(default=0)
    status = models.CharField(max_length=16, default="queued", choices=[(s, s) for s in STATUSES])
    error = models.TextField(blank=True)
    chunks = models.PositiveIntegerField(default=0)  # passages written so far (all of them once ready)
    progress = models.PositiveSmallIntegerField(default=0)  # percent while indexing
    # The job (django-tasks-db task id) working on it now: each slice of the job hands over to
    # the next, and a job that finds another id here stops (it was superseded).
    job_id = models.CharField(max_length=64, blank=True)
    spooled = models.PositiveIntegerField(null=True, blank=True)  # passages the parser found; null: not parsed yet
    spool_offset = models.BigIntegerField(default=0)  # bytes of the parsed passages already written
    # The passage splitter (extract.SPLITTER_VERSION) that cut it: one cut by an older one is split again.
    splitter = models.PositiveSmallIntegerField(default=0)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created_at"]
        constraints = [models.UniqueConstraint(fields=["owner", "sha256"], name="document_unique_owner_hash")]

    def __str__(self) -> str:
        return self.name


class Passage(models.Model):
    """A piece of a document with where it came from (page, line, section)."""

    document = models.ForeignKey(Document, on_delete=models.CASCADE, related_name="passages")
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    seq = models.PositiveIntegerField()
    text = models.TextField()
    location = models.JSONField(default=dict)
    # Its heading path ("Models › Field options › null", also location["section"]): the words'
    # index reads it beside the text, so a search finds a passage by its sections' names too.
    section = models.TextField(blank=True, default="")
    # The space its vector is in (null: not embedded yet, or embedded by a model no longer used).
    space = models.ForeignKey(VectorSpace, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")

    class Meta:
        ordering = ["document", "seq"]
        indexes = [models.Index(fields=["owner", "space"], name="passage_owner_space_idx")]


class FactVector(models.Model):
    """A memory fact's vector bookkeeping: its space and the text it was made from."""

    fact = models.OneToOneField("memory_app.MemoryFact", primary_key=True, on_delete=models.CASCADE, related_name="+")
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    space = models.ForeignKey(VectorSpace, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    text_hash = models.CharField(max_length=64)
