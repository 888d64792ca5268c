from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.utils.html import format_html

from agent.memory.extraction import regenerate_summary
from agent.models import LLMCall, ModelReliability, Profile, SessionToolGrant, ToolCallRecord
from agent.registry import get_agent
from agent.trust import policy
from memory_app.admin import MemoryFactAdmin, MemorySummaryAdmin
from memory_app.models import MemoryFact, MemorySummary

_DEFAULT = ""
POLICY_PREFIX = "policy__"


def _tool_names() -> list[str]:
    """Every tool a profile can name: the live registry (builtins + loaded user tools)."""
    return [t.name for t in get_agent().tools.all()]


class ProfileForm(forms.ModelForm):
    """enabled_tools as checkboxes and the tool policy as one allow/ask/deny choice per tool,
    instead of two JSON text boxes."""

    enabled_tools = forms.MultipleChoiceField(
        required=False, widget=forms.CheckboxSelectMultiple, help_text="Tools this profile is offered."
    )

    class Meta:
        model = Profile
        exclude = ("tool_policy",)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        names = _tool_names()
        current = list(self.instance.enabled_tools or []) if self.instance.pk else []
        # Keep names that are not loaded right now (a user tool with a load error) selectable.
        self.fields["enabled_tools"].choices = [(n, n) for n in sorted(set(names) | set(current))]
        saved = self.instance.tool_policy or {}
        for name in sorted(set(names) | set(saved)):
            default = policy.default_policy(name, {})
            if name == "filesystem":
                default = "allow to read, ask to change files"
            elif name == "http_request":
                default = "allow GET/HEAD, ask otherwise"
            self.fields[POLICY_PREFIX + name] = forms.ChoiceField(
                label=name,
                required=False,
                choices=[(_DEFAULT, f"default ({default})"), *[(c, c) for c in policy.CHOICES]],
                initial=saved.get(name, _DEFAULT),
            )

    def policy_fields(self):
        return [self[name] for name in self.fields if name.startswith(POLICY_PREFIX)]

    def save(self, commit=True):
        profile = super().save(commit=False)
        profile.tool_policy = {
            name[len(POLICY_PREFIX):]: value
            for name, value in self.cleaned_data.items()
            if name.startswith(POLICY_PREFIX) and value in policy.CHOICES
        }
        if commit:
            profile.save()
        return profile


@admin.register(Profile)
class ProfileAdmin(admin.ModelAdmin):
    form = ProfileForm
    list_display = ("id", "name", "llm_backend", "model_shown", "temperature", "max_iterations", "planning_enabled")
    list_filter = ("llm_backend", "planning_enabled")
    search_fields = ("id", "name", "description", "system_prompt")

    @admin.display(description="model", ordering="model")
    def model_shown(self, profile: Profile) -> str:
        """An empty model is not "-": it follows the owner's default, which is named."""
        return profile.model or f"(the default: {profile.resolved_model()})"

    def get_fieldsets(self, request, obj=None):
        form = self.get_form(request, obj)(instance=obj)
        policy_names = [n for n in form.fields if n.startswith(POLICY_PREFIX)]
        main = [n for n in form.fields if not n.startswith(POLICY_PREFIX)]
        return [
            (None, {"fields": main}),
            (
                "Tool policy",
                {
                    "fields": policy_names,
                    "description": "allow = run without asking; ask = the owner approves each call in the chat; "
                    "deny = never offered or run. Host tools also need the 'run host tools' permission.",
                },
            ),
        ]

    def get_form(self, request, obj=None, change=False, **kwargs):
        # The policy fields are added per instance in ProfileForm.__init__, not declared.
        kwargs["fields"] = None
        return super().get_form(request, obj, change=change, **kwargs)


@admin.register(ToolCallRecord)
class ToolCallRecordAdmin(admin.ModelAdmin):
    """The audit: read-only, filterable by tool, decision, outcome, user and date."""

    list_display = ("created_at", "user", "tool", "decision", "outcome", "duration_ms", "session_link", "is_subagent")
    list_filter = ("decision", "success", "tool", "is_subagent", "user", "created_at")
    search_fields = ("tool", "reason", "run_id", "approval_id", "session__id", "user__username")
    date_hierarchy = "created_at"
    list_select_related = ("user", "session")

    @admin.display(description="outcome")
    def outcome(self, obj):
        return {True: "ok", False: "failed", None: "—"}[obj.success]

    @admin.display(description="session")
    def session_link(self, obj):
        if not obj.session_id:
            return "—"
        return format_html('<a href="/#{}">{}</a>', obj.session_id, str(obj.session_id)[:8])

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


class ReadOnlyAdmin(admin.ModelAdmin):
    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False


@admin.register(ModelReliability)
class ModelReliabilityAdmin(ReadOnlyAdmin):
    """Tool-calling reliability per model: native and recovered calls, repairs, refusals."""

    list_display = ("model", "backend", "native_calls", "recovered_calls", "repaired_arguments", "refused_calls",
                    "unknown_tools", "broken_loops", "repeated_calls", "constrained_calls", "constrained_output", "updated_at")
    list_filter = ("backend",)
    search_fields = ("model",)


@admin.register(LLMCall)
class LLMCallAdmin(ReadOnlyAdmin):
    list_display = ("created_at", "purpose", "model", "prompt_tokens", "completion_tokens", "duration_ms", "outcome", "session")
    list_filter = ("purpose", "outcome", "backend", "model")
    search_fields = ("run_id", "session__id", "model")
    date_hierarchy = "created_at"


@admin.register(SessionToolGrant)
class SessionToolGrantAdmin(admin.ModelAdmin):
    """"Always in this chat" approvals; delete one to be asked again."""

    list_display = ("tool", "session", "created_at")
    list_filter = ("tool",)

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False


def _regenerate(model_admin, request, owner_ids: set[int]) -> None:
    """Regenerate with the first profile's backend and model (the admin has no session)."""
    profile = Profile.objects.order_by("id").first()
    if profile is None:
        model_admin.message_user(request, "no profiles exist; run `python manage.py migrate`", messages.ERROR)
        return
    backend = get_agent().backends.get(profile.llm_backend)
    for owner_id in owner_ids:
        regenerate_summary(owner_id, backend, profile.resolved_model())
    model_admin.message_user(request, f"regenerated {len(owner_ids)} summary(ies)", messages.SUCCESS)


# memory_app registers the memory admins; the agent adds the actions that need an LLM.
admin.site.unregister(MemoryFact)
admin.site.unregister(MemorySummary)


@admin.register(MemoryFact)
class MemoryFactWithSummaryAdmin(MemoryFactAdmin):
    actions = ["regenerate_summaries"]

    @admin.action(description="Regenerate summary from facts (for the owners of the selected facts)")
    def regenerate_summaries(self, request, queryset):
        _regenerate(self, request, {f.owner_id for f in queryset})


@admin.register(MemorySummary)
class MemorySummaryWithRegenerateAdmin(MemorySummaryAdmin):
    actions = ["regenerate_summaries"]

    @admin.action(description="Regenerate summary from facts")
    def regenerate_summaries(self, request, queryset):
        _regenerate(self, request, {s.owner_id for s in queryset})
