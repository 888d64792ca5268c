"""Voice notes to and from Telegram: the owner's note is checked like a page recording
(voice_app: really audio, not too long), transcribed by the speech-to-text server and shown
back as "🎤 …" before it is answered; with voice replies on, the answer to a voice note also
comes back as a voice note (sendVoice, Ogg/Opus from the text-to-speech server). Strangers
never get this far (handlers refuse them first)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Awaitable, Callable

from channels.db import database_sync_to_async
from django.conf import settings

from voice_app import config, speakable
from voice_app.client import SpeechError, synthesize, transcribe
from voice_app.recordings import check_recording, keep_clip

if TYPE_CHECKING:
    from telegram import Message

    from messaging_app.telegram.transport import TelegramTransport

log = logging.getLogger("navi.telegram")
db = database_sync_to_async
NO_STT = ("Navi cannot listen to voice notes yet: its owner sets a speech-to-text server in Navi → Settings → Voice. "
          "Type your message meanwhile.")
MAX_SPOKEN_CHARS = 4000  # one text-to-speech request; a longer answer is read up to there (the text has it all)


class VoiceRefused(Exception):
    """Tell the sender this and answer nothing."""


@dataclass
class Heard:
    text: str
    duration_s: float | None


def voice_of(msg: Message):
    """The voice note (or audio file) of a message, if it has one."""
    return msg.voice or msg.audio


async def hear(msg: Message, user_id: int, session_id: str,
               download: Callable[[str, int | None, int, str], Awaitable[bytes]]) -> Heard:
    """The words of the message's voice note, or VoiceRefused saying why not."""
    note = voice_of(msg)
    limit = settings.VOICE_MAX_SECONDS
    said = note.duration.total_seconds() if isinstance(note.duration, timedelta) else (note.duration or 0)
    if said > limit:  # what Telegram says first; the file's own headers are checked after the download
        raise VoiceRefused(f"The voice note is {said:.0f} s long; Navi transcribes up to {limit} s. "
                           "Send a shorter one.")
    servers = await db(config.current)()
    if not servers.stt_ready:
        raise VoiceRefused(NO_STT)
    size_limit = min(int(settings.TELEGRAM_FILE_MAX_MB), int(settings.VOICE_MAX_MB)) * 1024 * 1024
    data = await download(note.file_id, note.file_size, size_limit, "voice note")
    try:
        info = check_recording(data)
        text = await transcribe(data, info, servers)
    except SpeechError as exc:
        log.warning("telegram: a voice note was not transcribed: %s", exc.message)
        prefix = "Navi could not use the voice note" if exc.status == 400 else "Navi could not transcribe the voice note"
        raise VoiceRefused(f"{prefix}: {exc.message}") from None
    if not text.strip():
        raise VoiceRefused("Navi heard no words in the voice note. Try again closer to the microphone, or type.")
    user = await db(_user)(user_id)
    await db(keep_clip)(user, session_id, "telegram", data, info, text)
    return Heard(text, info.duration_s)


def _user(user_id: int):
    from django.contrib.auth import get_user_model

    return get_user_model().objects.get(pk=user_id)


async def replies_by_voice(user_id: int) -> bool:
    return await db(lambda: config.prefs_for(_user(user_id)).telegram_voice_replies)()


async def speak_answer(transport: TelegramTransport, chat_id: int, answer: str) -> None:
    """The answer's words (not its code) as a voice note; a failure is said in one line."""
    words = speakable.first_part(speakable.speakable(answer), MAX_SPOKEN_CHARS)
    if not words.strip():
        return  # all code or tables of numbers: the text says it better
    servers = await db(config.current)()
    try:
        data, _ = await synthesize(words, servers, "opus")
    except SpeechError as exc:
        log.warning("telegram: the answer was not spoken: %s", exc.message)
        await transport.send_text(chat_id, transport.escape(f"⚠ The answer could not be spoken: {exc.message}"))
        return
    await transport.send_voice(chat_id, data)
