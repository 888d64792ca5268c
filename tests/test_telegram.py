"""The Telegram channel against a fake Bot API server (tests/telegram_server.py): polling with
a lease and a stored offset, linking, strangers refused before anything runs, a streamed
conversation, commands, approvals as buttons, files both ways, and failures of Telegram."""

from __future__ import annotations

import asyncio
import base64
import json
from datetime import timedelta

import pytest
from asgiref.sync import sync_to_async
from django.test import Client
from django.utils import timezone

from agent.models import Profile
from agent.runs import get_run_manager
from messaging_app.models import BotState, TelegramChat, TelegramLink, TelegramLinkCode
from messaging_app.telegram.service import TelegramService
from sessions_app.models import Session
from tests.telegram_server import BOT_USERNAME, FakeTelegram

pytestmark = pytest.mark.django_db(transaction=True)
OWNER_TG = 4242
OTHER_TG = 5555
STRANGER_TG = 6666
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)


@pytest.fixture
def tg(settings):
    server = FakeTelegram().start()
    settings.TELEGRAM_BOT_TOKEN = server.token
    settings.TELEGRAM_API_URL = server.url
    settings.TELEGRAM_MODE = "polling"
    yield server
    server.stop()


@pytest.fixture(autouse=True)
def _no_planning(profiles, settings):
    Profile.objects.update(planning_enabled=False)
    settings.TERMINAL_ALLOWED_COMMANDS = "echo"


async def runs_finished() -> None:
    """Every run of this test's event loop has ended (before the database is flushed)."""
    manager = get_run_manager()
    for run in list(manager.active.values()):
        await asyncio.wait_for(run.done.wait(), timeout=30)


@pytest.fixture
async def bot(tg, owner_client, llm):
    """The channel, polling. Started after the database fixtures (list `linked` before `bot`):
    its worker thread and a fixture writing at once would lock the in-memory test database."""
    service = TelegramService(holder="worker-a", lease_s=5, poll_timeout=1, first_backoff_s=0.3)
    service.start()
    yield service
    await service.stop()
    await runs_finished()
    

@pytest.fixture
def linked(owner):
    return TelegramLink.objects.create(user=owner, telegram_user_id=OWNER_TG, username="owner_tg", chat_id=OWNER_TG)


async def offset() -> int:
    return (await BotState.objects.aget(name="telegram")).update_offset


async def request(client: Client, method: str, path: str, body: dict | None = None):
    call = getattr(client, method)
    if body is None:
        return await sync_to_async(call)(path)
    return await sync_to_async(call)(path, json.dumps(body), content_type="application/json")


def texts(tg: FakeTelegram, chat_id: int = OWNER_TG) -> list[str]:
    return [m.text for m in tg.messages_to(chat_id)]


def replied(tg: FakeTelegram, fragment: str, chat_id: int = OWNER_TG):
    """A wait_for predicate: the message to `chat_id` whose text contains `fragment`."""
    return lambda: next((m for m in tg.messages_to(chat_id) if fragment in m.text), None)


async def chat_session(chat_id: int = OWNER_TG) -> Session:
    chat = await TelegramChat.objects.select_related("session").aget(chat_id=chat_id)
    return chat.session


class TestPolling:
    async def test_the_offset_is_stored_after_each_update_and_a_restart_repeats_nothing(self, tg, linked, llm):
        first = TelegramService(holder="worker-a", lease_s=5, poll_timeout=1)
        first.start()
        tg.push_text(OWNER_TG, "/help")
        await tg.until(replied(tg, "Commands"))
        await tg.until(lambda: tg.confirmed() >= 2)
        await first.stop()
        assert await offset() == 2
        tg.push_text(OWNER_TG, "/frobnicate")  # arrives while Navi is down
        second = TelegramService(holder="worker-b", lease_s=5, poll_timeout=1)
        second.start()
        try:
            await tg.until(replied(tg, "Unknown command /frobnicate"))
            await tg.until(lambda: tg.confirmed() >= 3)
        finally:
            await second.stop()
        assert [t for t in texts(tg) if "Commands" in t].__len__() == 2  # /help once, /frobnicate once
        assert await offset() == 3
        assert llm.requests == []


class TestStrangers:
    async def test_a_stranger_gets_one_short_refusal_and_nothing_runs(self, tg, linked, bot, llm):
        tg.push_text(STRANGER_TG, "hello, who are you? run ls for me")
        tg.push_text(STRANGER_TG, "please?")
        tg.push_text(STRANGER_TG, "/sessions")
        refusals = await tg.until(lambda: tg.messages_to(STRANGER_TG))
        assert "private Navi assistant" in refusals[0].text
        await tg.until(lambda: tg.confirmed() >= 4)
        assert len(tg.messages_to(STRANGER_TG)) == 1  # one refusal, not one per message
        assert llm.requests == []  # no run, no LLM call
        assert not await Session.objects.aexists()
        assert await offset() == 4

    async def test_a_group_is_refused_until_enabled(self, tg, linked, bot, llm):
        tg.push_text(OWNER_TG, "hi all", chat_id=-100, chat_type="group")
        refusal = await tg.until(replied(tg, "not enabled in this chat", chat_id=-100))
        assert refusal and llm.requests == []
        await TelegramChat.objects.filter(chat_id=-100).aupdate(enabled=True)  # the admin enables it
        tg.push_text(OWNER_TG, "hi all", chat_id=-100, chat_type="group")
        await tg.until(replied(tg, "echo: hi all", chat_id=-100))


class TestLinking:
    async def test_the_owner_links_with_the_code_from_settings(self, tg, bot, owner_client, owner):
        response = await request(owner_client, "post", "/settings/telegram/link")
        assert response.status_code == 201
        body = response.json()
        assert body["link"] == f"https://t.me/{BOT_USERNAME}?start={body['code']}"
        assert timezone.now() + timedelta(minutes=9) < timezone.datetime.fromisoformat(body["expires_at"])
        settings_before = (await request(owner_client, "get", "/settings")).json()
        assert settings_before["telegram"] == {"linked": False, "username": None}

        tg.push_text(OWNER_TG, f"/start {body['code']}", username="owner_tg")
        await tg.until(replied(tg, "Linked"))
        link = await TelegramLink.objects.aget(user=owner)
        assert link.telegram_user_id == OWNER_TG
        assert (await request(owner_client, "get", "/settings")).json()["telegram"] == {"linked": True, "username": "owner_tg"}

        # The same code a second time (another account tries it): refused.
        tg.push_text(STRANGER_TG, f"/start {body['code']}")
        assert await tg.until(replied(tg, "already used", chat_id=STRANGER_TG))
        assert not await TelegramLink.objects.filter(telegram_user_id=STRANGER_TG).aexists()

        # Unlinking takes effect at once: the next message is a stranger's.
        assert (await request(owner_client, "delete", "/settings/telegram")).json()["unlinked"] is True
        tg.push_text(OWNER_TG, "still there?")
        assert await tg.until(replied(tg, "private Navi assistant"))

    async def test_an_expired_code_is_refused(self, tg, bot, owner_client, llm):
        code = (await request(owner_client, "post", "/settings/telegram/link")).json()["code"]
        await TelegramLinkCode.objects.aupdate(expires_at=timezone.now() - timedelta(seconds=1))
        tg.push_text(STRANGER_TG, f"/start {code}")
        assert await tg.until(replied(tg, "expired", chat_id=STRANGER_TG))
        tg.push_text(STRANGER_TG, "/start not-a-code")
        assert await tg.until(replied(tg, "not valid", chat_id=STRANGER_TG))
        assert not await TelegramLink.objects.aexists()
        assert llm.requests == []

    def test_linking_needs_a_bot_token(self, owner_client, settings):
        settings.TELEGRAM_BOT_TOKEN = ""
        response = owner_client.post("/settings/telegram/link")
        assert response.status_code == 409 and "TELEGRAM_BOT_TOKEN" in response.json()["error"]

    def test_linking_needs_a_login(self, anon_client, tg):
        assert anon_client.post("/settings/telegram/link").status_code in (401, 403)
