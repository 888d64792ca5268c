"""Long-term memory: facts about the owner, a narrative summary, and extraction bookkeeping.

Memory is per user: every query is scoped by `owner`. On SQLite the facts are
mirrored into an FTS5 table by triggers (see `search.ensure_fts`); a migration that rebuilds
the facts table on SQLite drops those triggers, which `ensure_fts` re-creates after migrate.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone

CATEGORY_MAX = 100
KEY_MAX = 200
VALUE_MAX = 2000


class MemoryFact(models.Model):
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memory_facts")
    category = models.CharField(max_length=CATEGORY_MAX)
    key = models.CharField(max_length=KEY_MAX)
    value = models.TextField(max_length=VALUE_MAX)
    source_session = models.ForeignKey(
        "sessions_app.Session", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # Saved by the agent while untrusted content was in its chat: what it had read ("" = trusted:
    # the owner's, or confirmed by them). The prompt shows such facts apart, as unverified.
    untrusted_source = models.TextField(blank=True, default="", db_default="")  # raw INSERTs (bench, scripts) too
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["owner", "category", "-updated_at"]
        constraints = [
            models.UniqueConstraint(fields=["owner", "category", "key"], name="memoryfact_unique_key"),
        ]
        indexes = [models.Index(fields=["owner", "key"], name="memoryfact_owner_key_idx")]

    def __str__(self) -> str:
        return f"{self.category}: {self.key} = {self.value[:60]}"

    def as_dict(self) -> dict:
        return {"category": self.category, "key": self.key, "value": self.value}


class MemorySummary(models.Model):
    """The narrative summary injected into every run (one row per owner)."""

    owner = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memory_summary")
    content = models.TextField(blank=True)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        verbose_name_plural = "memory summaries"

    def __str__(self) -> str:
        return f"Memory summary of {self.owner}"


class SessionMemoryState(models.Model):
    """When a session was last mined for facts; it is stale again once it has new activity."""

    session = models.OneToOneField(
        "sessions_app.Session", primary_key=True, on_delete=models.CASCADE, related_name="memory_state"
    )
    extracted_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"{self.session_id} @ {self.extracted_at:%Y-%m-%d %H:%M}"
