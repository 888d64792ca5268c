"""Tool registry state and per-session tool data."""

from __future__ import annotations

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
    updated_at = models.DateTimeField(auto_now=True)
