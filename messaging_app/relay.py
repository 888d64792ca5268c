"""RunRelay: one more subscriber of a run's frames, like a browser tab, that turns them into
messenger messages: the answer streams into one message edited at most once a second (a new
message past the size limit), thinking is not sent, a tool call is one short line, approvals
come with Approve / Deny buttons and published files are sent as files."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import mimetypes
import time
from pathlib import Path
from typing import Any

from channels.layers import get_channel_layer

from agent.frames.groups import frames_group
from agent.runs.manager import Run
from messaging_app.transport import Button, Transport
from sessions_app.models import SessionFile
from sessions_app.services import session_files_dir

log = logging.getLogger(__name__)
TERMINAL = ("stream_end", "stream_stopped", "error")
RESOLVED_TEXT = {"approve": "✅ approved", "deny": "❌ denied", "timeout": "⌛ nobody answered: declined",
                 "stopped": "⏹ stopped"}
ARGS_CHARS = 80


def approval_buttons(approval_id: str) -> list[list[Button]]:
    return [[Button("✅ Approve", f"a:{approval_id}:y"), Button("❌ Deny", f"a:{approval_id}:n")],
            [Button("Always in this chat", f"a:{approval_id}:a")]]


def short_args(args: Any) -> str:
    """A tool call's arguments on one short line."""
    if isinstance(args, dict) and len(args) == 1:
        args = next(iter(args.values()))
    text = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
    text = " ".join(text.split())
    return text if len(text) <= ARGS_CHARS else text[: ARGS_CHARS - 1] + "…"


class LiveMessage:
    """The answer as it streams: sent once, then edited at most every `min_edit_interval_s`;
    text past the size limit continues in a new message."""

    def __init__(self, transport: Transport, chat_id: int) -> None:
        self.transport, self.chat_id = transport, chat_id
        self.text = ""
        self.sent: list[tuple[int, str]] = []  # (message id, the text it shows)
        self.last_push = 0.0
        self.lock = asyncio.Lock()
        self.pending: asyncio.Task | None = None

    def append(self, delta: str) -> None:
        self.text += delta
        if self.pending is None or self.pending.done():
            self.pending = asyncio.create_task(self._push_later())
            self.pending.add_done_callback(_log_failure)

    async def finish(self, final: str | None = None) -> None:
        """Show the whole text (the run's final answer when given) and stop editing."""
        if final:
            self.text = final
        if self.pending is not None:  # let an edit in flight land: cancelling it could double it
            with contextlib.suppress(Exception):
                await self.pending
        await self._push_later()

    async def _push_later(self) -> None:
        async with self.lock:
            wait = self.last_push + self.transport.min_edit_interval_s - time.monotonic()
            if wait > 0 and self.sent:
                await asyncio.sleep(wait)
            await self._push()

    async def _push(self) -> None:
        if not self.text.strip():
            return
        for index, chunk in enumerate(self.transport.chunks(self.text)):
            if index < len(self.sent):
                if self.sent[index][1] != chunk:
                    await self.transport.edit_text(self.chat_id, self.sent[index][0], chunk)
                    self.sent[index] = (self.sent[index][0], chunk)
                    self.last_push = time.monotonic()
            else:
                self.sent.append((await self.transport.send_text(self.chat_id, chunk), chunk))
                self.last_push = time.monotonic()


class RunRelay:
    """Follows one run of a session from the session's frame group (own channel) to a chat."""

    def __init__(self, transport: Transport, chat_id: int, session_id: str) -> None:
        self.transport, self.chat_id, self.session_id = transport, chat_id, str(session_id)
        self.layer = get_channel_layer()
        self.channel = ""
        self.live: LiveMessage | None = None
        self.approvals: dict[str, tuple[int, str]] = {}  # approval id -> (message id, its text)
        self.answer = ""  # the run's final answer, once stream_end brought it (a voice reply reads it)

    async def join(self) -> None:
        """Join before the run starts, so not one frame is missed."""
        self.channel = await self.layer.new_channel()
        await self.layer.group_add(frames_group(self.session_id), self.channel)

    async def leave(self) -> None:
        if self.channel:
            await self.layer.group_discard(frames_group(self.session_id), self.channel)
            self.channel = ""

    async def follow(self, run: Run) -> None:
        """Relay the run's frames until its last one; a failing send is logged, never raised."""
        try:
            while True:
                try:
                    message = await asyncio.wait_for(self.layer.receive(self.channel), timeout=1.0)
                except asyncio.TimeoutError:
                    if run.done.is_set():
                        break  # every frame was published before `done`: none is coming
                    continue
                frame = message.get("frame") if message.get("type") == "run.event" else None
                if not frame or frame.get("run_id") != run.run_id:
                    continue
                try:
                    await self.on_frame(frame)
                except Exception:
                    log.exception("telegram relay: sending a %s frame to chat %s failed", frame.get("type"), self.chat_id)
                if frame["type"] in TERMINAL:
                    break
        finally:
            await self.leave()

    async def on_frame(self, frame: dict) -> None:
        kind = frame["type"]
        if frame.get("is_subagent") and kind not in ("approval_required", "approval_resolved"):
            return  # a sub-agent's steps stay on the page; its approvals must reach the owner here too
        if kind == "stream_delta":
            self._live().append(frame["delta"])
        elif kind == "tool_started":
            await self._close_live()
            line = f"⚙ {frame['tool']}: {short_args(frame.get('args'))}"
            await self.transport.send_text(self.chat_id, self.transport.escape(line))
        elif kind == "approval_required":
            await self._close_live()
            await self._ask(frame)
        elif kind == "approval_resolved":
            await self._resolved(frame)
        elif kind == "file_published":
            await self._send_file(frame)
        elif kind == "stream_end":
            self.answer = frame.get("content") or (self.live.text if self.live else "")
            await self._close_live(frame.get("content") or None)
        elif kind == "stream_stopped":
            await self._close_live()
            await self.transport.send_text(self.chat_id, "⏹ Stopped.")
        elif kind == "error":
            await self._close_live()
            await self.transport.send_text(self.chat_id, self.transport.escape(f"⚠ {frame.get('message', 'the run failed')}"))

    def _live(self) -> LiveMessage:
        if self.live is None:
            self.live = LiveMessage(self.transport, self.chat_id)
        return self.live

    async def _close_live(self, final: str | None = None) -> None:
        if final and self.live is None:
            self._live()
        if self.live is not None:
            live, self.live = self.live, None
            await live.finish(final)

    async def _ask(self, frame: dict) -> None:
        text = self.transport.escape(
            f"Navi wants to run {frame['tool']}: {short_args(frame.get('arguments'))}\n{frame.get('reason', '')}".strip()
        )
        message_id = await self.transport.send_text(self.chat_id, text, buttons=approval_buttons(frame["approval_id"]))
        self.approvals[frame["approval_id"]] = (message_id, text)

    async def _resolved(self, frame: dict) -> None:
        """Answered here or on the page: the buttons go, the outcome shows."""
        found = self.approvals.pop(frame.get("approval_id", ""), None)
        if found is None:
            return
        message_id, text = found
        outcome = RESOLVED_TEXT.get(frame.get("decision", ""), frame.get("decision", ""))
        if frame.get("remember") == "session" and frame.get("decision") == "approve":
            outcome += " (always in this chat)"
        await self.transport.edit_text(self.chat_id, message_id, f"{text}\n→ {self.transport.escape(outcome)}")

    async def _send_file(self, frame: dict) -> None:
        row = await SessionFile.objects.filter(session_id=self.session_id, name=frame.get("name", "")).afirst()
        if row is None:
            return
        path = Path(row.path)
        folder = Path(session_files_dir(self.session_id)).resolve()
        if not await asyncio.to_thread(_inside, path, folder):
            log.warning("telegram relay: published file %s is outside its session folder; not sent", row.name)
            return
        mime = frame.get("mime") or mimetypes.guess_type(row.name)[0] or "application/octet-stream"
        await self.transport.send_file(self.chat_id, path, row.name, mime)


def _log_failure(task: asyncio.Task) -> None:
    """An edit that failed while streaming is logged (the final push tries again)."""
    if not task.cancelled() and task.exception() is not None:
        log.warning("telegram relay: an edit of the streamed answer failed: %s", task.exception())


def _inside(path: Path, folder: Path) -> bool:
    real = path.resolve()
    return real.is_relative_to(folder) and real.is_file() and not path.is_symlink()
