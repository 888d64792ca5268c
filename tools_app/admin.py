from __future__ import annotations

from django.contrib import admin, messages
from django.http import Http404, HttpRequest, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html, format_html_join

from . import user_tools
from .models import ScratchpadSection, TodoList, UserTool
from .permissions import PERMISSION
from .toolset import get_tool_registry


@admin.register(UserTool)
class UserToolAdmin(admin.ModelAdmin):
    list_display = ("name", "enabled", "created_by", "has_error", "updated_at")
    list_filter = ("enabled", "created_by")
    search_fields = ("name", "description", "last_error")
    readonly_fields = ("path", "description", "error_text", "history", "created_at", "updated_at")
    fields = ("name", "enabled", "created_by", "path", "description", "error_text", "history", "created_at", "updated_at")
    actions = ("enable", "disable", "reload_tools")
    change_list_template = "admin/tools_app/usertool/change_list.html"

    # Enabling, restoring or reloading tool code runs it: only holders of run_host_tools.
    def has_change_permission(self, request, obj=None):
        return super().has_change_permission(request, obj) and request.user.has_perm(PERMISSION)

    def has_add_permission(self, request):
        return False  # tools are files: written by write_tool or the owner, then reloaded

    def has_delete_permission(self, request, obj=None):
        return super().has_delete_permission(request, obj) and request.user.has_perm(PERMISSION)

    def get_actions(self, request):
        actions = super().get_actions(request)
        if not request.user.has_perm(PERMISSION):
            for name in ("enable", "disable", "reload_tools"):
                actions.pop(name, None)
        return actions

    @admin.display(boolean=True, description="load error")
    def has_error(self, obj):
        return bool(obj.last_error)

    @admin.display(description="last load error")
    def error_text(self, obj):
        return format_html("<pre style='white-space:pre-wrap'>{}</pre>", obj.last_error or "none")

    @admin.display(description="saved versions")
    def history(self, obj):
        versions = user_tools.history_versions(obj.name)
        if not versions:
            return "none"
        return format_html_join(
            "", "<div>{} — <a href='{}'>restore…</a></div>",
            ((v, reverse("admin:tools_app_usertool_restore", args=[obj.name, v])) for v in versions),
        )

    def save_model(self, request, obj, form, change):
        super().save_model(request, obj, form, change)
        get_tool_registry().reload_user_tools()  # an enabled flag change applies from the next message

    @admin.action(description="Enable selected tools")
    def enable(self, request, queryset):
        queryset.update(enabled=True)
        self._reload(request)

    @admin.action(description="Disable selected tools")
    def disable(self, request, queryset):
        queryset.update(enabled=False)
        self._reload(request)

    @admin.action(description="Reload all user tools")
    def reload_tools(self, request, queryset=None):
        self._reload(request)

    def _reload(self, request: HttpRequest) -> None:
        result = get_tool_registry().reload_user_tools()
        loaded = sorted(t.name for t in getattr(result, "loaded", []))
        messages.info(request, f"Reloaded: {len(loaded)} user tool(s) loaded ({', '.join(loaded) or 'none'}).")
        for stem, error in sorted(getattr(result, "errors", {}).items()):
            messages.warning(request, f"{stem} failed to load: {error.splitlines()[0] if error else ''}")

    def get_urls(self):
        extra = [
            path("reload/", self.admin_site.admin_view(self.reload_view), name="tools_app_usertool_reload"),
            path("history/", self.admin_site.admin_view(self.history_view), name="tools_app_usertool_history"),
            path("restore/<str:name>/<str:version>/", self.admin_site.admin_view(self.restore_view), name="tools_app_usertool_restore"),
        ]
        return extra + super().get_urls()

    def reload_view(self, request):
        if request.method == "POST" and self.has_change_permission(request):
            self._reload(request)
        return HttpResponseRedirect(reverse("admin:tools_app_usertool_changelist"))

    def history_view(self, request):
        """Every tool with saved versions, deleted tools included."""
        root = user_tools.tools_dir() / ".history"
        names = sorted(p.name for p in root.iterdir() if p.is_dir()) if root.is_dir() else []
        rows = [(n, user_tools.history_versions(n)) for n in names]
        context = dict(self.admin_site.each_context(request), title="User tool history", rows=rows, opts=self.model._meta)
        return TemplateResponse(request, "admin/tools_app/usertool/history.html", context)

    def restore_view(self, request, name: str, version: str):
        if not self.has_change_permission(request):
            return HttpResponseRedirect(reverse("admin:index"))
        if version not in user_tools.history_versions(name):
            raise Http404(f"no saved version {version} of {name}")
        if request.method == "POST":
            try:
                user_tools.restore_tool_version(name, version)
            except user_tools.ToolFileError as exc:
                messages.error(request, str(exc))
            else:
                row = UserTool.objects.filter(name=name).first()
                messages.success(request, f"Restored {name} to version {version}" + (f"; load error: {row.last_error}" if row and row.last_error else "."))
            return HttpResponseRedirect(reverse("admin:tools_app_usertool_changelist"))
        source = (user_tools.history_dir(name) / f"{version}.py").read_text(encoding="utf-8")
        context = dict(self.admin_site.each_context(request), title=f"Restore {name} to {version}?", name=name,
                       version=version, source=source, opts=self.model._meta)
        return TemplateResponse(request, "admin/tools_app/usertool/restore_confirm.html", context)


@admin.register(ScratchpadSection)
class ScratchpadSectionAdmin(admin.ModelAdmin):
    list_display = ("scope", "section", "updated_at")
    search_fields = ("scope", "section", "content")


@admin.register(TodoList)
class TodoListAdmin(admin.ModelAdmin):
    list_display = ("scope", "updated_at")
    search_fields = ("scope",)
