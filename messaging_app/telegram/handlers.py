"""What the bot does with each update: linking (`/start <code>`), refusing strangers before
anything else happens (no run, no tool, no LLM call), commands, messages and files as turns
of the chat's session, and button presses (approvals, switching chats or profiles)."""

from __future__ import annotations

import asyncio
import base64
import logging
import time
from typing import TYPE_CHECKING

import httpx
from channels.db import database_sync_to_async
from django.conf import settings

from agent.models import Profile, ToolCallRecord
from agent.runs.manager import RunActive, get_run_manager
from agent.trust import approvals
from agent.web.consumers import MAX_IMAGE_BYTES
from messaging_app import links
from messaging_app.files import FileRefused, save_session_file
from messaging_app.models import TelegramChat
from messaging_app.relay import RESOLVED_TEXT, RunRelay
from messaging_app.telegram import voice
from messaging_app.telegram.client import call
from messaging_app.telegram.transport import TelegramTransport
from messaging_app.transport import Button
from navi_project.lazy import lazy_module
from sessions_app.models import Session
from sessions_app.uploads import describe_uploaded_files
from voice_app.turns import mark_voice_turn

if TYPE_CHECKING:
    from telegram import Bot, CallbackQuery, Message, Update

telegram = lazy_module("telegram")  # python-telegram-bot, ~80 ms of boot: first used with a bot token

log = logging.getLogger("navi.telegram")
db = database_sync_to_async

REFUSAL = "This is a private Navi assistant. Its owner links their account from Navi → Settings → Connect Telegram."
REFUSE_AGAIN_AFTER_S = 3600.0  # a stranger who keeps writing gets one refusal an hour, not one a message
HELP = ("Talk to me as on the Navi page. Commands:\n/new — start a new chat\n/stop — stop the answer in progress\n"
        "/sessions — switch to a recent chat\n/profile — show or change the chat's profile\n"
        "Photos and files you send are added to the chat; voice notes are transcribed and answered.")
BUSY = "Still working on your last message — wait for the answer, or send /stop to cancel it."


class Refused(Exception):
    """Tell the sender this (a file too large, a bad type) and do nothing else."""


def _command(text: str) -> tuple[str, str]:
    """("/name", "arguments") of a command; "/name@Bot" is the same command."""
    head, _, rest = text.strip().partition(" ")
    return head.split("@", 1)[0].lower(), rest.strip()


class UpdateHandler:
    def __init__(self, bot: Bot) -> None:
        self.bot = bot
        self.transport = TelegramTransport(bot)
        self.relays: dict[str, RunRelay] = {}  # session id -> the relay of its run started here
        self.tasks: set[asyncio.Task] = set()
        self._refused: dict[int, float] = {}

    async def __call__(self, update: Update) -> None:
        if update.callback_query is not None:
            await self.on_callback(update.callback_query)
        elif update.message is not None:
            await self.on_message(update.message)

    async def shutdown(self) -> None:
        for task in list(self.tasks):
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)

    # --- messages ----------------------------------------------------------------------------
    async def on_message(self, msg: Message) -> None:
        sender = msg.from_user
        if sender is None or sender.is_bot:
            return
        text = msg.text or msg.caption or ""
        name, argument = _command(text) if text.startswith("/") else ("", "")
        if name == "/start" and argument:
            await self._link(msg, argument)
            return
        user_id, chat = await db(links.allowed_chat)(sender.id, msg.chat.id, msg.chat.type, msg.chat.title or "")
        if user_id is None:
            await self._refuse(msg)
            return
        if chat is None:
            log.info("telegram: refused chat %s (%s): not enabled for Navi", msg.chat.id, msg.chat.type)
            await self._reply(msg, "Navi is not enabled in this chat. Its owner can enable it in the admin "
                                   "(Messaging → Telegram chats), or talk to the bot in a private chat.")
            return
        if name:
            await self._command(msg, chat, name, argument)
            return
        if voice.voice_of(msg) is not None:
            await self._voice_turn(msg, chat)
            return
        await self._turn(msg, chat, text)

    async def _refuse(self, msg: Message) -> None:
        """One short refusal; nothing else happens: no session, no run, no LLM call."""
        sender_id = msg.from_user.id
        log.info("telegram: refused a message from unlinked account %s", sender_id)
        last = self._refused.get(sender_id)
        if last is not None and time.monotonic() - last < REFUSE_AGAIN_AFTER_S:
            return
        if len(self._refused) > 10_000:  # many strangers: forget the oldest refusals
            self._refused = dict(sorted(self._refused.items(), key=lambda item: item[1])[-5_000:])
        self._refused[sender_id] = time.monotonic()
        await self._reply(msg, REFUSAL)

    async def _link(self, msg: Message, code: str) -> None:
        if msg.chat.type != "private":
            await self._reply(msg, "Send the link code in a private chat with the bot, not in a group.")
            return
        sender = msg.from_user
        try:
            await db(links.redeem)(code, sender.id, sender.username or "", msg.chat.id)
        except links.LinkRefused as exc:
            log.info("telegram: link code refused for account %s: %s", sender.id, exc)
            await self._reply(msg, str(exc))
            return
        log.info("telegram: account %s (@%s) linked", sender.id, sender.username or "-")
        await self._reply(msg, "Linked: this Telegram account now talks to your Navi. " + HELP)

    async def _reply(self, msg: Message, text: str, buttons: list[list[Button]] | None = None) -> int:
        return await self.transport.send_text(msg.chat.id, self.transport.escape(text), buttons=buttons)

    # --- commands -------------------------------------------------------------------------------
    async def _command(self, msg: Message, chat, name: str, argument: str) -> None:
        if name == "/new":
            await db(links.new_session)(chat)
            await self._reply(msg, "New chat started. It is on the Navi page too.")
        elif name == "/stop":
            session_id = await db(links.current_session)(chat)
            stopped = await get_run_manager().request_stop(session_id)
            await self._reply(msg, "Stopping…" if stopped else "Nothing is running.")
        elif name == "/sessions":
            await self._list_sessions(msg, chat)
        elif name == "/profile":
            await self._profiles(msg, chat)
        elif name in ("/start", "/help"):
            await self._reply(msg, HELP)
        else:
            await self._reply(msg, f"Unknown command {name}. " + HELP)

    async def _list_sessions(self, msg: Message, chat) -> None:
        current = await db(links.current_session)(chat)
        rows = await db(links.recent_sessions)(chat.user_id)
        buttons = [[Button(("• " if str(s.pk) == current else "") + (s.title or f"Chat of {s.created_at:%d %b %H:%M}")[:40],
                           f"s:{s.pk}")] for s in rows]
        await self._reply(msg, "Your recent chats — tap one to continue it here:", buttons)

    async def _profiles(self, msg: Message, chat) -> None:
        session_id = await db(links.current_session)(chat)
        session = await Session.objects.select_related("profile").aget(pk=session_id)
        profiles = [p async for p in Profile.objects.order_by("name")]
        buttons = [[Button(("• " if p.pk == session.profile_id else "") + p.name, f"p:{p.pk}")] for p in profiles]
        await self._reply(msg, f"This chat uses the profile {session.profile.name}. Tap one to switch:", buttons)

    # --- a turn ---------------------------------------------------------------------------------
    async def _voice_turn(self, msg: Message, chat) -> None:
        """A voice note: its transcript is shown ("🎤 …"), then answered like typed text."""
        session_id = await db(links.current_session)(chat)
        try:
            heard = await voice.hear(msg, chat.user_id, session_id, self._download)
        except (voice.VoiceRefused, Refused) as exc:
            await self._reply(msg, str(exc))
            return
        await self._reply(msg, f"🎤 “{heard.text}”")
        speak = await voice.replies_by_voice(chat.user_id)
        await self._turn(msg, chat, heard.text, spoken=(heard.duration_s, speak))

    async def _turn(self, msg: Message, chat, text: str, spoken: tuple[float | None, bool] | None = None) -> None:
        """`spoken`: (seconds, reply by voice too) of a turn that was a voice note."""
        session_id = await db(links.current_session)(chat)
        try:
            images, files_note = await self._attachments(msg, session_id) if spoken is None else ([], "")
        except Refused as exc:
            await self._reply(msg, str(exc))
            return
        content = text + files_note
        if not content.strip() and not images:
            await self._reply(msg, "Send text, a photo or a file. " + HELP)
            return
        relay = RunRelay(self.transport, msg.chat.id, session_id)
        await relay.join()  # before the run starts: not one frame is missed
        try:
            run = await get_run_manager().start(session_id, content, images or None)
        except RunActive:
            await relay.leave()
            await self._reply(msg, BUSY)
            return
        except Exception:
            await relay.leave()
            raise
        if spoken is not None:
            await db(mark_voice_turn)(session_id, "telegram", spoken[0])
        self.relays[session_id] = relay
        speak = spoken is not None and spoken[1]
        task = asyncio.create_task(self._follow(relay, run, speak), name=f"telegram-relay-{run.run_id}")
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _follow(self, relay: RunRelay, run, speak: bool = False) -> None:
        try:
            await relay.follow(run)
        finally:
            if self.relays.get(relay.session_id) is relay:
                del self.relays[relay.session_id]
        if speak and relay.answer:
            await voice.speak_answer(self.transport, relay.chat_id, relay.answer)

    async def _attachments(self, msg: Message, session_id: str) -> tuple[list[str], str]:
        """(images for the model, the note naming saved files) of a message with a photo or a file."""
        if msg.photo:
            photo = msg.photo[-1]  # the largest size Telegram made
            data = await self._download(photo.file_id, photo.file_size, min(MAX_IMAGE_BYTES, _file_limit()), "photo")
            return [base64.b64encode(data).decode()], ""
        document = msg.document
        if document is None:
            return [], ""
        name = document.file_name or "file"
        data = await self._download(document.file_id, document.file_size, _file_limit(), name)
        try:
            row = await db(save_session_file)(session_id, name, data)
        except FileRefused as exc:
            raise Refused(str(exc)) from None
        return [], await db(describe_uploaded_files)(session_id, [{"name": row.name}])

    async def _download(self, file_id: str, size: int | None, limit: int, what: str) -> bytes:
        """The file's bytes, refused before downloading when Telegram says it is too big (and
        cut off while downloading if it lied)."""
        too_big = Refused(f"The {what} is too large: Navi takes files up to {limit // (1024 * 1024)} MB from "
                          "Telegram. Upload it on the Navi page instead, or send a smaller one.")
        if size and size > limit:
            raise too_big
        info = await call(lambda: self.bot.get_file(file_id))
        data = bytearray()
        async with httpx.AsyncClient(timeout=60) as client, client.stream("GET", info.file_path) as response:
            if response.status_code != 200:
                raise Refused(f"Telegram did not hand over the {what} (HTTP {response.status_code}); send it again.")
            async for chunk in response.aiter_bytes():
                data += chunk
                if len(data) > limit:
                    raise too_big
        return bytes(data)

    # --- buttons --------------------------------------------------------------------------------
    async def on_callback(self, query: CallbackQuery) -> None:
        answer = await self._callback_answer(query)
        await call(lambda: self.bot.answer_callback_query(query.id, text=answer[:200] or None))

    async def _callback_answer(self, query: CallbackQuery) -> str:
        user_id = await db(links.linked_user)(query.from_user.id)
        if user_id is None:
            log.warning("telegram: refused a button press from unlinked account %s", query.from_user.id)
            return "This bot only answers its owner."
        kind, _, value = (query.data or "").partition(":")
        if kind == "a":
            return await self._approval(query, user_id, value)
        chat_id = query.message.chat.id if query.message else None
        chat = await db(_chat_of)(chat_id, user_id)
        if chat is None:
            return "This chat is not linked to your Navi."
        if kind == "s":
            session = await db(links.switch_session)(chat, value)
            return f"Now in: {session.title or 'chat'}" if session else "That chat is gone or not yours."
        if kind == "p":
            return await self._switch_profile(chat, value)
        return "Unknown button."

    async def _approval(self, query: CallbackQuery, user_id: int, value: str) -> str:
        """Through the same durable records as the page; only for approvals of the presser's own runs."""
        approval_id, _, choice = value.partition(":")
        record = await ToolCallRecord.objects.filter(approval_id=approval_id).select_related("session").afirst()
        if record is None or record.session is None or record.session.owner_id != user_id or choice not in ("y", "n", "a"):
            log.warning("telegram: refused a forged or foreign approval button (%r) from account %s",
                        approval_id[:40], query.from_user.id)
            return "This approval is not yours, or does not exist."
        try:
            decision = await approvals.answer(str(record.session_id), approval_id, "deny" if choice == "n" else "approve",
                                              "session" if choice == "a" else None, user_id)
        except approvals.ApprovalAlreadyAnswered:
            return "Already answered."
        except (ValueError, approvals.ApprovalNotFound) as exc:
            return str(exc)
        if str(record.session_id) not in self.relays and query.message is not None:
            # No relay follows that run here (a restart in between): close the buttons ourselves.
            outcome = RESOLVED_TEXT.get(decision, decision)
            try:
                await self.transport.edit_text(query.message.chat.id, query.message.message_id,
                                               self.transport.escape(f"{query.message.text or ''}\n→ {outcome}"))
            except telegram.error.TelegramError as exc:
                log.warning("telegram: closing the buttons of approval %s failed: %s", approval_id, exc)
        return "Approved." if decision == "approve" else "Denied."

    async def _switch_profile(self, chat, profile_id: str) -> str:
        profile = await Profile.objects.filter(pk=profile_id).afirst()
        if profile is None:
            return "Unknown profile."
        session_id = await db(links.current_session)(chat)
        await Session.objects.filter(pk=session_id, owner_id=chat.user_id).aupdate(profile=profile)
        return f"This chat now uses {profile.name}."


def _file_limit() -> int:
    return min(int(settings.TELEGRAM_FILE_MAX_MB), int(settings.SESSION_FILES_MAX_SIZE_MB)) * 1024 * 1024


def _chat_of(chat_id: int | None, user_id: int) -> TelegramChat | None:
    """The presser's chat, if Navi may talk there (private, or a group the owner enabled)."""
    if chat_id is None:
        return None
    chat = TelegramChat.objects.filter(chat_id=chat_id, user_id=user_id).first()
    return chat if chat is not None and (chat.kind == "private" or chat.enabled) else None
