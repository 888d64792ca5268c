"""A notification target: one browser's push subscription, one Apprise URL, or a kind another
app registers (notify_app.senders)."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from notify_app.senders import describe


class NotifyTarget(models.Model):
    """Where a user's notifications go. `url` and the subscription's endpoint and keys are
    secrets (whoever has them can post to the user): output shows `address()` only."""

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="notify_targets")
    # No choices: the kinds are the senders registered at start (webpush, apprise, telegram…).
    kind = models.CharField(max_length=30)
    label = models.CharField(max_length=100, blank=True)
    subscription = models.JSONField(
        default=dict, blank=True, help_text="webpush: the browser's PushSubscription {endpoint, keys}"
    )
    url = models.TextField(blank=True, help_text="apprise: the service URL (secret; shown redacted)")
    created_at = models.DateTimeField(auto_now_add=True)
    last_ok_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    last_error_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["created_at", "id"]
        indexes = [models.Index(fields=["owner", "kind"])]

    def __str__(self) -> str:
        return f"{self.kind} target {self.pk} of {self.owner_id}"

    def address(self) -> str:
        """The redacted address: enough to recognise the target, no secret."""
        return describe(self)

    def as_dict(self) -> dict:
        return {
            "id": self.pk,
            "kind": self.kind,
            "label": self.label,
            "address": self.address(),
            "created_at": self.created_at.isoformat() if self.created_at else None,
            "last_ok_at": self.last_ok_at.isoformat() if self.last_ok_at else None,
            "last_error": self.last_error,
            "last_error_at": self.last_error_at.isoformat() if self.last_error_at else None,
        }
