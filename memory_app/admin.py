"""Memory in the admin. The "regenerate summary" actions call the LLM, so agent.admin adds them."""

from __future__ import annotations

from django.contrib import admin

from .models import MemoryFact, MemorySummary, SessionMemoryState


@admin.register(MemoryFact)
class MemoryFactAdmin(admin.ModelAdmin):
    list_display = ("category", "key", "value", "owner", "updated_at", "source_session")
    list_filter = ("category", "owner")
    search_fields = ("category", "key", "value")
    raw_id_fields = ("source_session",)
    ordering = ("owner", "category", "key")


@admin.register(MemorySummary)
class MemorySummaryAdmin(admin.ModelAdmin):
    list_display = ("owner", "updated_at", "preview")

    @admin.display(description="summary")
    def preview(self, obj: MemorySummary) -> str:
        return obj.content[:120]


@admin.register(SessionMemoryState)
class SessionMemoryStateAdmin(admin.ModelAdmin):
    list_display = ("session", "extracted_at")
    raw_id_fields = ("session",)
