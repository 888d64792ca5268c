"""Linked messenger accounts, their chats (each mapped to a Navi session), one-time link codes,
and the bot's shared state (poll lease, update offset, last error) that every worker reads."""

from __future__ import annotations

import hashlib

from django.conf import settings
from django.db import models
from django.utils import timezone


def hash_code(raw: str) -> str:
    """Link codes are stored hashed: a database dump does not let anyone link their account."""
    return hashlib.sha256(raw.encode()).hexdigest()


class TelegramLink(models.Model):
    """One Navi user ↔ one Telegram account. Only linked accounts may talk to Navi."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="telegram_link")
    telegram_user_id = models.BigIntegerField(unique=True)
    username = models.CharField(max_length=64, blank=True)
    chat_id = models.BigIntegerField(help_text="The private chat with the bot (notifications go there).")
    linked_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"@{self.username or self.telegram_user_id} → {self.user}"


class TelegramLinkCode(models.Model):
    """A one-time code shown on /settings; `/start <code>` links the sender (10 minutes, one use)."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    code_hash = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField()
    used_at = models.DateTimeField(null=True, blank=True)


class TelegramChat(models.Model):
    """A chat the bot talks in, and the Navi session it is on. Private chats of the linked
    account are allowed; a group only once the owner enables it here (admin)."""

    chat_id = models.BigIntegerField(unique=True)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="telegram_chats")
    kind = models.CharField(max_length=16, default="private")
    title = models.CharField(max_length=200, blank=True)
    enabled = models.BooleanField(default=False, help_text="Groups only: let the owner talk to Navi in this group.")
    session = models.ForeignKey("sessions_app.Session", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"{self.kind} chat {self.title or self.chat_id}"


class BotState(models.Model):
    """Shared by every worker: who polls (a lease renewed while polling, taken over once it
    expires), the next update offset (stored after each handled update) and the last error."""

    name = models.CharField(max_length=32, primary_key=True)
    lease_holder = models.CharField(max_length=64, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    update_offset = models.BigIntegerField(default=0)
    bot_username = models.CharField(max_length=64, blank=True)
    last_error = models.TextField(blank=True)
    last_error_at = models.DateTimeField(null=True, blank=True)
    last_ok_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.name} (offset {self.update_offset}, held by {self.lease_holder or 'nobody'})"
