"""What a messenger offers the relay (messaging_app.relay): send, edit, files, and its own text
limits and formatting. Telegram (messaging_app.telegram.transport) is the first; a Matrix or
e-mail transport implements the same class and reuses the relay and the linking rules."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Button:
    """An inline button: `data` comes back in the messenger's callback (Telegram: 64 bytes max)."""

    label: str
    data: str


Buttons = list[list[Button]]


class Transport(ABC):
    name = ""
    min_edit_interval_s = 1.0  # a streamed answer edits its message at most this often

    @abstractmethod
    def chunks(self, markdown: str) -> list[str]:
        """The model's Markdown as messages in the messenger's format, each within its size limit."""

    @abstractmethod
    async def send_text(self, chat_id: int, text: str, *, buttons: Buttons | None = None, formatted: bool = True) -> int:
        """Send one message (already within limits); returns its id."""

    @abstractmethod
    async def edit_text(self, chat_id: int, message_id: int, text: str, *, buttons: Buttons | None = None,
                        formatted: bool = True) -> None:
        """Replace a message's text (and its buttons: None removes them)."""

    @abstractmethod
    async def send_file(self, chat_id: int, path: Path, name: str, mime: str) -> None:
        """Send a file Navi published: images as photos, the rest as documents."""

    def escape(self, text: str) -> str:
        """Plain text made safe to embed in a formatted message."""
        return text
