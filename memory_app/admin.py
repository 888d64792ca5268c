from __future__ import annotations

from django.contrib import admin, messages

from .models import MemoryFact, MemorySummary, SessionMemoryState


@admin.register(MemoryFact)
class MemoryFactAdmin(admin.ModelAdmin):
    list_display = ("category", "key", "value", "owner", "updated_at", "source_session")
    list_filter = ("category", "owner")
    search_fields = ("category", "key", "value")
    raw_id_fields = ("source_session",)
    ordering = ("owner", "category", "key")
    actions = ["regenerate_summaries"]

    @admin.action(description="Regenerate summary from facts (for the owners of the selected facts)")
    def regenerate_summaries(self, request, queryset):
        _regenerate(self, request, {f.owner_id for f in queryset})


@admin.register(MemorySummary)
class MemorySummaryAdmin(admin.ModelAdmin):
    list_display = ("owner", "updated_at", "preview")
    actions = ["regenerate_summaries"]

    @admin.display(description="summary")
    def preview(self, obj: MemorySummary) -> str:
        return obj.content[:120]

    @admin.action(description="Regenerate summary from facts")
    def regenerate_summaries(self, request, queryset):
        _regenerate(self, request, {s.owner_id for s in queryset})


@admin.register(SessionMemoryState)
class SessionMemoryStateAdmin(admin.ModelAdmin):
    list_display = ("session", "extracted_at")
    raw_id_fields = ("session",)


def _regenerate(model_admin, request, owner_ids: set[int]) -> None:
    """Regenerate with the default profile's backend and model (the admin has no session)."""
    from agent.models import Profile
    from agent.registry import get_agent

    from .services import regenerate_summary

    profile = Profile.objects.order_by("id").first()
    if profile is None:
        model_admin.message_user(request, "no profiles exist; run `python manage.py migrate`", messages.ERROR)
        return
    backend = get_agent().backends.get(profile.llm_backend)
    for owner_id in owner_ids:
        regenerate_summary(owner_id, backend, profile.resolved_model())
    model_admin.message_user(request, f"regenerated {len(owner_ids)} summary(ies)", messages.SUCCESS)
