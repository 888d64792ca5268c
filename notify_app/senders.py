"""The registry of senders by target kind, and what every sender shares.

notify_app registers "webpush" and "apprise"; another app adds its kind (say "telegram") from its
own AppConfig.ready with `register_sender`, so this app never learns its name.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Protocol


@dataclass(frozen=True)
class Notification:
    """What is sent: a title, a body, the page to open (`/?session=<id>`), and a tag (a newer
    notification with the same tag replaces the older one on the device)."""

    title: str
    body: str
    url: str
    tag: str = ""

    def payload(self) -> dict[str, str]:
        return asdict(self)


class BadTarget(ValueError):
    """The data for a new target is unusable; the message names the problem and the fix."""


class DeliveryFailed(Exception):
    """One delivery failed; the message is for the owner (what happened, what to do), without
    secrets. `expired` = the target is gone for good (a push subscription answered 404/410)."""

    def __init__(self, message: str, *, expired: bool = False):
        super().__init__(message)
        self.message = message
        self.expired = expired


class Sender(Protocol):
    kind: str

    def clean(self, data: dict[str, Any]) -> dict[str, Any]:
        """Model fields (subscription, url) for a new target from the request; raises BadTarget."""

    def describe(self, target: Any) -> str:
        """The target's address with every secret hidden."""

    async def send(self, target: Any, note: Notification) -> None:
        """Deliver or raise DeliveryFailed (the caller bounds the time)."""


SENDERS: dict[str, Sender] = {}


def register_sender(sender: Sender) -> None:
    """Make `sender.kind` targets deliverable (call from an AppConfig.ready)."""
    SENDERS[sender.kind] = sender


def get_sender(kind: str) -> Sender | None:
    return SENDERS.get(kind)


def describe(target: Any) -> str:
    sender = SENDERS.get(target.kind)
    return sender.describe(target) if sender else f"({target.kind}: no sender installed)"
