"""Tool registry state and per-session tool data."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone


class UserTool(models.Model):
    """One row per file in user_tools/. The file is the source of truth for code; this row is
    the registry's state (replaces the original's tools/enabled.json)."""

    class CreatedBy(models.TextChoices):
        AGENT = "agent"
        OWNER = "owner"

    name = models.CharField(max_length=100, unique=True)
    path = models.CharField(max_length=1024)
    enabled = models.BooleanField(default=True)
    description = models.TextField(blank=True)
    last_error = models.TextField(blank=True)
    created_by = models.CharField(max_length=16, choices=CreatedBy.choices, default=CreatedBy.OWNER)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        # Granted in the admin (Users → permissions); superusers have it. See tools_app.permissions.
        permissions = [
            ("run_host_tools", "Can run host tools (terminal, code, SSH, writing tools and files)"),
        ]

    def __str__(self) -> str:
        return self.name


class ScratchpadSection(models.Model):
    """A named working-notes section; `scope` is a session id or a sub-agent's own id."""

    scope = models.CharField(max_length=64, db_index=True)
    section = models.CharField(max_length=100)
    content = models.TextField(blank=True)
    # Written while untrusted content was in the chat (what it was): read back, it is wrapped as data.
    untrusted_source = models.TextField(blank=True, default="", db_default="")  # raw INSERTs too
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["scope", "section"]
        constraints = [
            models.UniqueConstraint(fields=["scope", "section"], name="scratchpad_unique_section")
        ]


class TodoList(models.Model):
    """The checklist of one session (or sub-agent): a list of {task, status} items."""

    scope = models.CharField(max_length=64, unique=True)
    items = models.JSONField(default=list)
    # Written while untrusted content was in the chat (what it was): read back, it is wrapped as data.
    untrusted_source = models.TextField(blank=True, default="", db_default="")  # raw INSERTs too
    updated_at = models.DateTimeField(auto_now=True)


class MCPServer(models.Model):
    """A Model Context Protocol server whose tools Navi offers as `<name>__<tool>`.

    `owner` NULL = a global server (made in the admin, offered to every user, secrets hidden);
    otherwise the owner's own, invisible to other users. The live state (connected, its tools,
    the last error) is written here by the process that holds the connection (tools_app.mcp)."""

    class Transport(models.TextChoices):
        STDIO = "stdio"
        HTTP = "http"

    class State(models.TextChoices):
        CONNECTING = "connecting"
        CONNECTED = "connected"
        FAILED = "failed"
        DISABLED = "disabled"

    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.CASCADE, related_name="mcp_servers",
        help_text="Empty: a global server offered to every user.",
    )
    name = models.CharField(max_length=40, help_text="Letters, digits, _ and -; tools are offered as <name>__<tool>.")
    transport = models.CharField(max_length=8, choices=Transport.choices, default=Transport.HTTP)
    command = models.CharField(max_length=500, blank=True, help_text="stdio: the program to run.")
    args = models.JSONField(default=list, blank=True, help_text="stdio: its arguments (a JSON list).")
    env = models.JSONField(default=dict, blank=True, help_text="stdio: environment variables (secret; never shown back).")
    url = models.CharField(max_length=1000, blank=True, help_text="http: the streamable-HTTP endpoint.")
    headers = models.JSONField(default=dict, blank=True, help_text="http: request headers (secret; never shown back).")
    network = models.BooleanField(default=False, help_text="stdio: may the program use the network?")
    paths = models.JSONField(
        default=list, blank=True, help_text="stdio: host folders the program may read (a JSON list); nothing else is visible."
    )
    writable_paths = models.JSONField(
        default=list, blank=True,
        help_text="stdio: host folders the program may write (a JSON list); its own data folder always is.",
    )
    pending_paths = models.JSONField(
        default=list, blank=True,
        help_text="stdio: folders a pasted config names, shown to the program only once the owner confirms each "
        "(read-only, or writable) on its card.",
    )
    enabled = models.BooleanField(default=True)
    profiles = models.JSONField(default=list, blank=True, help_text="Profile ids that offer it; empty = every profile.")
    tool_allowlist = models.JSONField(
        default=list, blank=True, help_text="Its tools to offer (names as the server gives them); empty = all."
    )
    auto_approve = models.BooleanField(default=False, help_text="Run all its tools without asking (policy allow).")
    auto_approve_tools = models.JSONField(default=list, blank=True, help_text="Its tools that run without asking.")
    state = models.CharField(max_length=12, choices=State.choices, default=State.CONNECTING)
    last_error = models.TextField(blank=True)
    stderr_tail = models.TextField(blank=True)
    tools = models.JSONField(default=list, blank=True, help_text="The tools it listed last: [{name, description}].")
    resources = models.JSONField(
        default=list, blank=True, help_text="The resources it listed last: [{uri, name, description, mime_type}]."
    )
    prompts = models.JSONField(default=list, blank=True, help_text="The prompts it listed last: [{name, description, arguments}].")
    state_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        verbose_name = "MCP server"
        constraints = [
            models.UniqueConstraint(fields=["owner", "name"], name="mcp_server_unique_name_per_owner"),
            models.UniqueConstraint(
                fields=["name"], condition=models.Q(owner__isnull=True), name="mcp_server_unique_global_name"
            ),
        ]

    def __str__(self) -> str:
        return self.name
