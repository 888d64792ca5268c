"""Voice notes in the Telegram channel, against the fake Bot API (tests/telegram_server.py) and
the fake speech server (tests/speech_server.py): the owner's note is transcribed, shown back
and answered like typed text (approvals too); answers come back as voice notes when the owner
turned that on; a stranger's note reaches neither the model nor the speech server."""

from __future__ import annotations

import pytest

from agent.models import Profile
from messaging_app.models import TelegramChat, TelegramLink
from messaging_app.telegram.service import TelegramService
from sessions_app.models import Message
from tests import audio_samples as samples
from tests.llm_server import Rule, Turn
from tests.speech_server import SpeechServer
from tests.telegram_server import FakeTelegram
from tests.test_telegram import OWNER_TG, STRANGER_TG, approve_button, replied, runs_finished, script_terminal
from voice_app import audio
from voice_app.models import VoiceClip, VoicePrefs

pytestmark = pytest.mark.django_db(transaction=True)


# The fixtures of tests/test_telegram.py, as there (a module's fixtures are its own).
@pytest.fixture
def tg(settings):
    server = FakeTelegram().start()
    settings.TELEGRAM_BOT_TOKEN, settings.TELEGRAM_API_URL, settings.TELEGRAM_MODE = server.token, server.url, "polling"
    yield server
    server.stop()


@pytest.fixture(autouse=True)
def _no_planning(profiles, settings):
    Profile.objects.update(planning_enabled=False)
    settings.TERMINAL_ALLOWED_COMMANDS = "echo"


@pytest.fixture
def linked(owner):
    return TelegramLink.objects.create(user=owner, telegram_user_id=OWNER_TG, username="owner_tg", chat_id=OWNER_TG)


@pytest.fixture
async def bot(tg, owner_client, llm):
    service = TelegramService(holder="worker-a", lease_s=5, poll_timeout=1, first_backoff_s=0.3)
    service.start()
    yield service
    await service.stop()
    await runs_finished()


@pytest.fixture
def speech(settings):
    server = SpeechServer(transcript="what is the weather tomorrow").start()
    settings.STT_BASE_URL = settings.TTS_BASE_URL = server.url
    yield server
    server.stop()


def push_voice(tg, user_id: int, seconds: float = 2.0, duration: int | None = None) -> str:
    data = samples.ogg_opus(seconds)
    file_id = tg.add_file(data, f"voice/file_{len(tg.files)}.oga")
    note = {"file_id": file_id, "file_unique_id": f"v{file_id}", "duration": duration or round(seconds),
            "mime_type": "audio/ogg", "file_size": len(data)}
    tg.push_text(user_id, "", voice=note)
    return file_id


async def voice_row() -> Message:
    chat = await TelegramChat.objects.aget(chat_id=OWNER_TG)
    return await Message.objects.filter(session_id=chat.session_id, role="user").alatest("seq")


async def test_a_voice_note_is_transcribed_shown_and_answered(tg, linked, speech, bot, llm):
    push_voice(tg, OWNER_TG, 2.0)
    shown = await tg.until(replied(tg, "🎤"))
    assert shown.text == "🎤 “what is the weather tomorrow”"
    await tg.until(replied(tg, "echo: what is the weather tomorrow"))
    heard = speech.of("transcriptions")[0]
    assert heard.file[:2] == ("speech.ogg", "audio/ogg") and heard.file[2] == samples.ogg_opus(2.0)
    user = [m for m in llm.requests[-1]["messages"] if m["role"] == "user"][-1]
    assert user["content"].startswith("what is the weather tomorrow\n")  # the clock follows, as for typed text
    await runs_finished()
    row = await voice_row()
    assert row.meta["voice"] == {"source": "telegram", "duration_s": 2.0}
    assert not tg.calls_of("sendVoice") and not speech.of("speech")  # voice replies are off
    assert not await VoiceClip.objects.aexists()  # and nothing is kept


async def test_with_voice_replies_on_the_answer_comes_back_as_a_voice_note(tg, linked, speech, bot, llm, owner):
    await VoicePrefs.objects.acreate(user=owner, telegram_voice_replies=True, keep_audio=True)
    llm.add_rule(Rule(match="weather", turns=[Turn(content="Sunny, **22 °C**. Run this:\n```sh\ncurl wttr.in\n```\nSee [the forecast](https://wttr.in).")]))
    push_voice(tg, OWNER_TG, 1.0)
    sent = await tg.until(lambda: [m for m in tg.messages_to(OWNER_TG) if m.kind == "voice"])
    assert audio.inspect(sent[0].file[1]).kind == "ogg"
    spoken = speech.of("speech")[0].fields
    assert spoken["response_format"] == "opus"
    assert spoken["input"] == "Sunny, 22 °C. Run this: See the forecast."  # no code, the link as its text
    texts = [m.text for m in tg.messages_to(OWNER_TG) if m.kind == "text"]
    assert any("curl wttr.in" in t for t in texts)  # the text still has everything
    clip = await VoiceClip.objects.aget()  # kept: the owner turned keeping on
    assert clip.source == "telegram" and clip.transcript == "what is the weather tomorrow"
    await runs_finished()


async def test_a_typed_message_is_answered_in_text_only(tg, linked, speech, bot, llm, owner):
    await VoicePrefs.objects.acreate(user=owner, telegram_voice_replies=True)
    tg.push_text(OWNER_TG, "hello")
    await tg.until(replied(tg, "echo: hello"))
    await runs_finished()
    assert not tg.calls_of("sendVoice") and speech.heard == []


async def test_a_voice_turn_asks_for_approval_like_a_typed_one(tg, linked, speech, bot, llm):
    speech.transcript = "say hi in the terminal"
    script_terminal(llm, "say hi")
    push_voice(tg, OWNER_TG)
    asked = await tg.until(replied(tg, "wants to run terminal"))
    tg.push_callback(OWNER_TG, approve_button(asked), asked.message_id)
    await tg.until(replied(tg, "All done."))
    await runs_finished()


async def test_a_strangers_voice_note_reaches_neither_the_model_nor_the_speech_server(tg, linked, speech, bot, llm):
    push_voice(tg, STRANGER_TG)
    refusal = await tg.until(replied(tg, "private Navi assistant", chat_id=STRANGER_TG))
    assert refusal
    await tg.until(lambda: tg.confirmed() >= 2)
    assert speech.heard == [] and llm.requests == [] and not tg.calls_of("getFile")


async def test_without_a_speech_server_the_owner_is_told_how_to_set_one_up(tg, linked, bot, llm, settings):
    settings.STT_BASE_URL = ""
    push_voice(tg, OWNER_TG)
    told = await tg.until(replied(tg, "Settings → Voice"))
    assert "cannot listen to voice notes yet" in told.text
    assert llm.requests == [] and not tg.calls_of("getFile")


async def test_a_note_over_the_limit_is_refused_before_it_is_downloaded(tg, linked, speech, bot, llm, settings):
    settings.VOICE_MAX_SECONDS = 60
    push_voice(tg, OWNER_TG, seconds=1.0, duration=61)
    told = await tg.until(replied(tg, "61 s long"))
    assert "up to 60 s" in told.text
    assert speech.heard == [] and llm.requests == [] and not tg.calls_of("getFile")


async def test_a_note_that_lies_about_its_length_is_checked_by_its_headers(tg, linked, speech, bot, llm, settings):
    settings.VOICE_MAX_SECONDS = 60
    push_voice(tg, OWNER_TG, seconds=75.0, duration=5)
    told = await tg.until(replied(tg, "could not use the voice note"))
    assert "75 s long" in told.text
    assert speech.heard == [] and llm.requests == []
