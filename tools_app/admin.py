from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.http import Http404, HttpRequest, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html, format_html_join

from . import user_tools
from .mcp import service as mcp_service
from .mcp.config import ConfigError, check_name, check_transport, data_dir, masked
from .mcp.paths import check_paths
from .mcp.service import may_run_stdio, merge_secrets, state_of
from .models import MCPServer, ScratchpadSection, TodoList, UserTool
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


class MCPServerForm(forms.ModelForm):
    """Secret env and header values are shown masked; sent back unchanged, they are kept."""

    class Meta:
        model = MCPServer
        fields = "__all__"

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk:
            for key in ("env", "headers"):
                self.initial[key] = masked(getattr(self.instance, key) or {})

    def _secrets(self, key: str) -> dict:
        value = self.cleaned_data.get(key) or {}
        if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
            raise forms.ValidationError('an object of strings, e.g. {"API_KEY": "..."}')
        return merge_secrets(getattr(self.instance, key) or {}, value) if self.instance.pk else value

    def clean_env(self) -> dict:
        return self._secrets("env")

    def clean_headers(self) -> dict:
        return self._secrets("headers")

    def clean_name(self) -> str:
        try:
            return check_name(self.cleaned_data.get("name"))
        except ConfigError as exc:
            raise forms.ValidationError(str(exc)) from None

    def clean(self):
        data = super().clean()
        user = getattr(self, "current_user", None)
        if data.get("transport") == MCPServer.Transport.STDIO and user is not None and not may_run_stdio(user):
            raise forms.ValidationError(
                "Only holders of the 'run host tools' permission may save stdio servers: they run programs on this "
                "machine. Use an http server, or ask an administrator."
            )
        try:
            check_transport(data.get("transport", ""), data.get("command", ""), data.get("url", ""))
            if data.get("transport") == MCPServer.Transport.STDIO:
                owner = data.get("owner")
                check_paths(data.get("paths") or [], owner.pk if owner else None,
                            allowed=(data_dir(self.instance.pk),) if self.instance.pk else (),
                            writable=data.get("writable_paths") or [])
        except ConfigError as exc:
            raise forms.ValidationError(str(exc)) from None
        return data


@admin.register(MCPServer)
class MCPServerAdmin(admin.ModelAdmin):
    form = MCPServerForm
    list_display = ("name", "owner", "transport", "enabled", "shown_state", "tool_count", "short_error")
    list_filter = ("transport", "enabled", "state")
    search_fields = ("name", "url", "command", "last_error")
    readonly_fields = ("state", "test_button", "state_at", "tool_list", "error_text", "stderr_text", "created_at",
                       "updated_at")
    actions = ("test_connection",)
    fieldsets = (
        (None, {"fields": ("name", "owner", "transport", "enabled", "profiles")}),
        ("stdio", {"fields": ("command", "args", "env", "network", "paths", "writable_paths")}),
        ("streamable HTTP", {"fields": ("url", "headers")}),
        ("Tools and approvals", {"fields": ("tool_allowlist", "auto_approve", "auto_approve_tools")}),
        ("State", {"fields": ("state", "test_button", "state_at", "tool_list", "error_text", "stderr_text",
                              "created_at", "updated_at")}),
    )

    def get_urls(self):
        test = path("<int:server_id>/test/", self.admin_site.admin_view(self.test_view), name="tools_app_mcpserver_test")
        return [test, *super().get_urls()]

    @admin.display(description="test connection")
    def test_button(self, obj):
        if not obj.pk:
            return "save the server first"
        # Submits the change form (its CSRF token included) to the test view; nothing is saved.
        return format_html(
            "<button type='submit' formaction='{}' formmethod='post' formnovalidate>Test connection</button>",
            reverse("admin:tools_app_mcpserver_test", args=[obj.pk]),
        )

    def test_view(self, request, server_id: int):
        server = MCPServer.objects.filter(pk=server_id).first()
        if server is None:
            raise Http404(f"no MCP server {server_id}")
        if request.method == "POST" and self.has_change_permission(request, server):
            self._report(request, mcp_service.test_connection(server))
        return HttpResponseRedirect(reverse("admin:tools_app_mcpserver_change", args=[server_id]))

    def _report(self, request, server) -> None:
        level = messages.SUCCESS if server.state == "connected" else messages.WARNING
        tools = len([t for t in server.tools or [] if not t.get("problem")])
        detail = f"{tools} tool(s)" if server.state == "connected" else server.last_error or state_of(server)
        messages.add_message(request, level, f"{server.name}: {state_of(server)} — {detail}")

    def get_form(self, request, obj=None, change=False, **kwargs):
        form = super().get_form(request, obj, change, **kwargs)
        form.current_user = request.user  # the form refuses stdio servers to staff without run_host_tools
        return form

    @admin.display(description="state")
    def shown_state(self, obj):
        return state_of(obj)

    @admin.display(description="tools")
    def tool_count(self, obj):
        return len([t for t in obj.tools or [] if not t.get("problem")])

    @admin.display(description="last error")
    def short_error(self, obj):
        return (obj.last_error or "")[:120]

    @admin.display(description="tools")
    def tool_list(self, obj):
        rows = [(t["name"], t.get("problem") or t.get("description", "")) for t in obj.tools or []]
        return format_html_join("", "<div><code>{}</code> — {}</div>", rows) or "none yet"

    @admin.display(description="last error")
    def error_text(self, obj):
        return format_html("<pre style='white-space:pre-wrap'>{}</pre>", obj.last_error or "none")

    @admin.display(description="stderr (last lines)")
    def stderr_text(self, obj):
        return format_html("<pre style='white-space:pre-wrap'>{}</pre>", obj.stderr_tail or "none")

    @admin.action(description="Test connection")
    def test_connection(self, request, queryset):
        for server in queryset:
            self._report(request, mcp_service.test_connection(server))
