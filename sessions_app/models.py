"""Sessions and their messages.

The two buffers of a chat (display `messages`, LLM `context`) are two views of one table:
`in_display` and `in_context` flags on each row. A turn is saved by appending rows, never by
rewriting history, so saving costs the same at message 10 and message 10,000.
"""

from __future__ import annotations

import hashlib
import secrets
import uuid

from django.apps import apps as django_apps
from django.conf import settings
from django.db import models
from django.utils import timezone


class SessionQuerySet(models.QuerySet):
    def owned_by(self, user, raw_id: object) -> "SessionQuerySet":
        """The user's session with this id, as a query of 0 or 1 rows. Someone else's session
        and a malformed id are simply not found: callers answer both like a missing one."""
        try:
            uid = uuid.UUID(str(raw_id))
        except ValueError:
            return self.none()
        return self.filter(pk=uid, owner=user)


def profile_model():
    """The profile model sessions refer to (settings.NAVI_PROFILE_MODEL, like AUTH_USER_MODEL):
    sessions_app only needs its id, name and resolved_model(), not the app that defines it."""
    return django_apps.get_model(settings.NAVI_PROFILE_MODEL)


class Session(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="chat_sessions"
    )
    profile = models.ForeignKey(settings.NAVI_PROFILE_MODEL, on_delete=models.PROTECT, related_name="+")
    title = models.CharField(max_length=200, blank=True)
    # Who wrote the title: "" = nobody yet or the first words of the first message (the model
    # may replace it after the first answer), "model" = generated, "user" = set by the owner
    # (never overwritten).
    title_source = models.CharField(max_length=8, blank=True, default="")
    pinned = models.BooleanField(default=False)
    created_at = models.DateTimeField(default=timezone.now)
    last_active = models.DateTimeField(default=timezone.now, db_index=True)
    context_token_count = models.PositiveIntegerField(default=0)
    # The model's context window at the last turn: the page's token meter shows "used / window"
    # after a reload as it did live (0 = not known yet).
    context_window = models.PositiveIntegerField(default=0)
    # Cross-process run claim: which run is active and when its owner last said it is alive.
    # Set with a conditional UPDATE so two workers can never start two runs on one session.
    active_run_id = models.CharField(max_length=64, blank=True)
    active_run_heartbeat = models.DateTimeField(null=True, blank=True)
    # Who started the chat: "" the owner, else the app that writes in it unattended ("routine").
    origin = models.CharField(max_length=16, blank=True, default="")
    # Written to by something other than the owner (a routine) since the owner last opened it.
    unread = models.BooleanField(default=False)
    # The model this chat uses instead of its profile's ("" = the profile's): every call of the
    # chat (answer, tool steps, title, planning, compression) asks for it.
    model = models.CharField(max_length=200, blank=True, default="")

    objects = SessionQuerySet.as_manager()

    class Meta:
        ordering = ["-pinned", "-last_active"]

    def __str__(self) -> str:
        return self.title or f"Session {str(self.id)[:8]}"

    def as_dict(self) -> dict:
        """The list/detail shape; select_related("profile") avoids a query per session."""
        profile = self.profile
        return {
            "session_id": str(self.id),
            "id": str(self.id),
            "profile_id": self.profile_id,
            "profile_name": profile.name,
            "profile_model": profile.resolved_model(),
            "profile_backend": profile.effective_backend() if hasattr(profile, "effective_backend")
            else getattr(profile, "llm_backend", ""),
            "model": self.model,
            "title": self.title,
            "pinned": self.pinned,
            "created_at": self.created_at.isoformat(),
            "last_active": self.last_active.isoformat(),
            "context_token_count": self.context_token_count,
            "context_window": self.context_window,
            "origin": self.origin,
            "unread": self.unread,
        }


class Message(models.Model):
    class Role(models.TextChoices):
        USER = "user"
        ASSISTANT = "assistant"
        TOOL = "tool"
        SYSTEM = "system"

    class Status(models.TextChoices):
        COMPLETE = "complete"
        PARTIAL = "partial"
        INTERRUPTED = "interrupted"

    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="messages")
    seq = models.PositiveIntegerField()
    role = models.CharField(max_length=16, choices=Role.choices)
    content = models.TextField(blank=True, default="")
    thinking = models.TextField(blank=True, default="")
    images = models.JSONField(default=list, blank=True)
    tool_calls = models.JSONField(default=list, blank=True)
    tool_call_id = models.CharField(max_length=100, blank=True)
    name = models.CharField(max_length=100, blank=True)
    is_summary = models.BooleanField(default=False)
    in_display = models.BooleanField(default=True)
    in_context = models.BooleanField(default=True)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.COMPLETE)
    # What the live view showed besides the text, so a reload can redraw it (sessions_app.history):
    # {"kind": "error"|"stopped"} on display-only system rows; on tool rows "files" (published),
    # "memory" (facts saved) and "subagent" (the sub-agent's tool calls).
    meta = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    # Versions of a turn (sessions_app.history): an edit or a regenerate appends a new user row
    # with `version_of` = the seq of the turn's first user row; a regenerate also names the user
    # version it answers again (`answer_of`). `selected`: the answer version shown for its prompt.
    version_of = models.PositiveIntegerField(default=0)
    answer_of = models.PositiveIntegerField(default=0)
    selected = models.BooleanField(default=True)
    # A row of a version not shown: the seq of that version's user row, and the flags it had,
    # given back when the version is shown again (0: not parked).
    parked_by = models.PositiveIntegerField(default=0)
    parked_display = models.BooleanField(default=False)
    parked_context = models.BooleanField(default=False)

    class Meta:
        ordering = ["session", "seq"]
        constraints = [
            models.UniqueConstraint(fields=["session", "seq"], name="message_unique_seq"),
        ]
        indexes = [
            models.Index(fields=["session", "in_context", "seq"], name="message_context_idx"),
            models.Index(fields=["session", "in_display", "seq"], name="message_display_idx"),
            models.Index(fields=["status"], name="message_status_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.role} #{self.seq}: {self.content[:60]}"

    def as_dict(self) -> dict:
        sources = (self.meta or {}).get("sources")
        return {
            "id": self.id,
            "seq": self.seq,
            "role": self.role,
            "content": self.content,
            "thinking": self.thinking,
            "images": self.images,
            "tool_calls": self.tool_calls,
            "tool_call_id": self.tool_call_id or None,
            "name": self.name or None,
            "is_summary": self.is_summary,
            "status": self.status,
            "meta": self.meta or {},
            "created_at": self.created_at.isoformat(),
            **({"sources": sources} if sources and isinstance(sources, list) else {}),  # an answer's cited passages (its chips)
        }


class SessionFile(models.Model):
    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="files")
    name = models.CharField(max_length=255)
    path = models.CharField(max_length=1024)
    size = models.PositiveBigIntegerField(default=0)
    published = models.BooleanField(default=False, help_text="Shown inline in the chat.")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["session", "created_at"]
        constraints = [
            models.UniqueConstraint(fields=["session", "name"], name="sessionfile_unique_name"),
        ]

    def __str__(self) -> str:
        return self.name


def hash_token(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


class ApiToken(models.Model):
    """A bearer token for scripts. Only the SHA-256 of the token is stored."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens"
    )
    name = models.CharField(max_length=100, blank=True)
    token_hash = models.CharField(max_length=64, unique=True)
    prefix = models.CharField(max_length=12, help_text="First characters, to tell tokens apart.")
    created_at = models.DateTimeField(default=timezone.now)
    last_used = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.user})"

    @classmethod
    def issue(cls, user, name: str = "") -> tuple["ApiToken", str]:
        """Create a token; the raw value is returned once and never stored."""
        raw = "navi_" + secrets.token_urlsafe(32)
        token = cls.objects.create(user=user, name=name, token_hash=hash_token(raw), prefix=raw[:10])
        return token, raw


class LoginAttempt(models.Model):
    """A failed (or still running) login for a username from an IP. Kept in the database so
    that every worker process counts the same attempts; deleting the rows unlocks a login."""

    username = models.CharField(max_length=150)
    ip = models.CharField(max_length=64)
    at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        indexes = [models.Index(fields=["username", "ip", "at"])]

    def __str__(self) -> str:
        return f"{self.username} from {self.ip} at {self.at:%Y-%m-%d %H:%M:%S}"


class UserSettings(models.Model):
    """Per-user preferences of the chat page (GET/PATCH /settings)."""

    class Theme(models.TextChoices):
        SYSTEM = "system"
        LIGHT = "light"
        DARK = "dark"

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="navi_settings")
    theme = models.CharField(max_length=8, choices=Theme.choices, default=Theme.SYSTEM)
    default_profile = models.ForeignKey(
        settings.NAVI_PROFILE_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+",
        help_text="Profile of new chats (empty: secretary).",
    )
    notify_when_done = models.BooleanField(default=False, help_text="Notify when an answer finishes.")
    # IANA name; "" = the server's TIME_ZONE. Routines read it as their default zone.
    time_zone = models.CharField(max_length=64, blank=True, default="")
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        verbose_name_plural = "user settings"

    def __str__(self) -> str:
        return f"Settings of {self.user}"

    def as_dict(self) -> dict:
        return {
            "theme": self.theme,
            "default_profile": self.default_profile_id,
            "notify_when_done": self.notify_when_done,
            "time_zone": self.time_zone_name,
        }

    @property
    def time_zone_name(self) -> str:
        return self.time_zone or settings.TIME_ZONE


class AllowedHost(models.Model):
    """A host on the owner's network that web tools, notification and MCP targets may reach
    although it resolves to a private address (navi_project.netguard); set in Settings."""

    entry = models.CharField(max_length=260, unique=True)  # `host` or `host:port`, lower case
    added_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["entry"]

    def as_dict(self) -> dict:
        return {"entry": self.entry, "added_by": self.added_by.get_username() if self.added_by else None,
                "created_at": self.created_at.isoformat()}


class ServerSettings(models.Model):
    """The owner's connections and default models (one row; Settings → Connections, staff):
    read by navi_project.connections in every process. "" (or servers null) = `.env`'s value."""

    ollama_url = models.CharField(max_length=500, blank=True, default="")
    default_model = models.CharField(max_length=200, blank=True, default="")
    # Which server `default_model` was chosen from: "ollama" or an OpenAI-compatible server's name.
    default_backend = models.CharField(max_length=64, blank=True, default="")
    embedding_model = models.CharField(max_length=200, blank=True, default="")
    # [{"name", "base_url", "key"}]: `key` encrypted with the SECRET_KEY (sessions_app.connections),
    # never shown back. null = the one `.env` names.
    openai_servers = models.JSONField(null=True, blank=True, default=None)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        verbose_name = "connections and default models"
        verbose_name_plural = "connections and default models"

    def __str__(self) -> str:
        return "Connections and default models"
