"""The Telegram channel against a fake Bot API server (tests/telegram_server.py): polling with
a lease and a stored offset, linking, strangers refused before anything runs, a streamed
conversation, commands, approvals as buttons, files both ways, and failures of Telegram."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
from datetime import timedelta

import pytest
from asgiref.sync import sync_to_async
from django.test import AsyncClient, Client
from django.utils import timezone

from agent.models import Profile, SessionToolGrant, ToolCallRecord
from agent.runs.manager import get_run_manager
from messaging_app.models import BotState, TelegramChat, TelegramLink, TelegramLinkCode
from messaging_app.telegram.notify import send_to_owner
from messaging_app.telegram.service import TelegramService, start_service, stop_service
from sessions_app.models import Session
from tests.llm_server import Rule, Turn
from tests.telegram_server import BOT_USERNAME, FakeTelegram
from tests.test_consumer import connect

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
        assert (await BotState.objects.aget(name="telegram")).lease_holder == ""  # handed over on a clean stop
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


    async def test_a_database_error_while_taking_the_lease_does_not_end_the_poller(self, tg, linked, llm, monkeypatch):
        from django.db import OperationalError

        from messaging_app.telegram import state

        real, failures = state.take_lease, []

        def flaky(holder, lease_s):
            if not failures:
                failures.append(holder)
                raise OperationalError("database table is locked")
            return real(holder, lease_s)

        monkeypatch.setattr(state, "take_lease", flaky)
        service = TelegramService(holder="worker-a", lease_s=5, poll_timeout=1, first_backoff_s=0.1)
        service.start()
        try:
            tg.push_text(OWNER_TG, "/help")
            await tg.until(replied(tg, "Commands"))
        finally:
            await service.stop()
        assert failures == ["worker-a"]


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


def answer_message(tg: FakeTelegram, fragment: str, chat_id: int = OWNER_TG):
    return replied(tg, fragment, chat_id)


class TestConversation:
    async def test_an_answer_streams_by_edits_at_most_once_a_second_and_ends_whole(self, tg, linked, bot, llm, owner_client):
        answer = " ".join(f"word{i}" for i in range(60))
        llm.add_rule(Rule(match="tell me", turns=[Turn(content=answer, thinking="secret pondering", chunk_size=6, delay=0.07)]))
        tg.push_text(OWNER_TG, "tell me a story")
        streamed = await tg.until(answer_message(tg, "word0"))
        tg.push_text(OWNER_TG, "and another?")  # while the run is active
        busy = await tg.until(answer_message(tg, "Still working"))
        assert "/stop" in busy.text
        await tg.until(lambda: streamed.text == answer)
        assert len(streamed.texts) >= 3  # sent, edited while streaming, then whole
        gaps = [b - a for a, b in zip(streamed.times, streamed.times[1:])]
        assert min(gaps) >= 1.0, gaps
        assert not any("secret pondering" in t for t in texts(tg))  # thinking is not sent
        await runs_finished()
        session = await chat_session()
        shown = (await request(owner_client, "get", f"/sessions/{session.pk}")).json()["messages"]
        assert [(m["role"], m["content"]) for m in shown] == [("user", "tell me a story"), ("assistant", answer)]
        assert len(llm.requests) == 1  # "and another?" started nothing

    async def test_flood_control_is_waited_out_and_long_answers_are_split(self, tg, linked, bot, llm):
        tg.fail("sendMessage", 429, retry_after=1)
        long = "\n".join(f"line {i} " + "x" * 60 for i in range(100))  # ~6 700 characters
        llm.add_rule(Rule(match="long one", turns=[Turn(content=long, chunk_size=0)]))
        tg.push_text(OWNER_TG, "long one please")
        await tg.until(answer_message(tg, "line 99"))
        parts = [m for m in tg.messages_to(OWNER_TG) if "line " in m.text]
        assert len(parts) == 2 and all(len(p.text) <= 4096 for p in parts)
        assert "\n".join(p.text for p in parts) == long
        first, retried = tg.calls_of("sendMessage")[:2]
        assert retried.at - first.at >= 1.0  # retry_after honoured

    async def test_markdown_arrives_as_safe_telegram_html(self, tg, linked, bot, llm):
        llm.add_rule(Rule(match="format", turns=[Turn(content="**Done** <script>alert(1)</script> & `x<y`")]))
        tg.push_text(OWNER_TG, "format this")
        message = await tg.until(answer_message(tg, "x&lt;y</code>"))
        assert message.text == "<b>Done</b> &lt;script&gt;alert(1)&lt;/script&gt; &amp; <code>x&lt;y</code>"
        assert tg.calls_of("sendMessage")[-1].params["parse_mode"] == "HTML"

    async def test_a_tool_call_is_one_short_line(self, tg, linked, bot, llm):
        llm.add_rule(Rule(match="plan my day", turns=[
            Turn(tool_calls=[{"name": "todo", "arguments": {"action": "add", "item": "buy milk " * 30}}]),
            Turn(content="Added."),
        ]))
        tg.push_text(OWNER_TG, "plan my day")
        await tg.until(answer_message(tg, "Added."))
        line = next(t for t in texts(tg) if t.startswith("⚙ todo"))
        assert len(line) <= 100 and "\n" not in line

    async def test_commands(self, tg, linked, bot, llm, owner):
        tg.push_text(OWNER_TG, "first chat")
        await tg.until(answer_message(tg, "echo: first chat"))
        await runs_finished()
        first = await chat_session()
        tg.push_text(OWNER_TG, "/new")
        await tg.until(answer_message(tg, "New chat started"))
        assert (await chat_session()).pk != first.pk
        tg.push_text(OWNER_TG, "/sessions")
        listing = await tg.until(answer_message(tg, "recent chats"))
        assert f"s:{first.pk}" in [b["callback_data"] for b in listing.buttons]
        tg.push_callback(OWNER_TG, f"s:{first.pk}", listing.message_id)
        await tg.until(lambda: tg.calls_of("answerCallbackQuery"))
        assert (await chat_session()).pk == first.pk
        tg.push_text(OWNER_TG, "/profile")
        profiles = await tg.until(answer_message(tg, "uses the profile"))
        tg.push_callback(OWNER_TG, "p:server_admin", profiles.message_id)
        await tg.until(lambda: len(tg.calls_of("answerCallbackQuery")) == 2)
        assert (await chat_session()).profile_id == "server_admin"
        tg.push_text(OWNER_TG, "/stop")
        assert await tg.until(answer_message(tg, "Nothing is running"))
        tg.push_text(OWNER_TG, "/frobnicate now")
        assert await tg.until(answer_message(tg, "Unknown command /frobnicate"))
        assert len(llm.requests) == 1


def script_terminal(llm, match: str, answer: str = "All done.") -> None:
    llm.add_rule(Rule(match=match, turns=[
        Turn(tool_calls=[{"name": "terminal", "arguments": {"command": "echo approved-ran"}}]), Turn(content=answer),
    ]))


def approve_button(message) -> str:
    return next(b["callback_data"] for b in message.buttons if "Approve" in b["text"])


class TestApprovals:
    async def test_an_approval_approved_by_button(self, tg, linked, bot, llm, owner):
        script_terminal(llm, "say hi")
        tg.push_text(OWNER_TG, "say hi")
        asked = await tg.until(answer_message(tg, "wants to run terminal"))
        assert {b["text"] for b in asked.buttons} == {"✅ Approve", "❌ Deny", "Always in this chat"}
        tg.push_callback(OWNER_TG, approve_button(asked), asked.message_id)
        await tg.until(answer_message(tg, "All done."))
        await tg.until(lambda: "approved" in asked.text)
        assert asked.reply_markup is None  # the buttons are gone
        record = await ToolCallRecord.objects.aget(tool="terminal")
        assert record.decision == "approved" and record.decided_by_id == owner.pk and record.success
        assert "approved-ran" in str(llm.requests[-1]["messages"][-1]["content"])

    async def test_always_in_this_chat_remembers_the_tool_for_the_chat(self, tg, linked, bot, llm):
        script_terminal(llm, "check disk")
        tg.push_text(OWNER_TG, "check disk")
        asked = await tg.until(answer_message(tg, "wants to run terminal"))
        always = next(b["callback_data"] for b in asked.buttons if b["text"] == "Always in this chat")
        tg.push_callback(OWNER_TG, always, asked.message_id)
        await tg.until(lambda: "always in this chat" in asked.text)
        session = await chat_session()
        assert await SessionToolGrant.objects.filter(session_id=session.pk, tool="terminal").aexists()

    async def test_an_approval_denied_on_the_page_updates_the_telegram_message(self, tg, linked, bot, llm, owner_client):
        script_terminal(llm, "clean up", answer="OK, I left it.")
        tg.push_text(OWNER_TG, "clean up")
        asked = await tg.until(answer_message(tg, "wants to run terminal"))
        approval_id = approve_button(asked).split(":")[1]
        session = await chat_session()
        response = await request(owner_client, "post", f"/sessions/{session.pk}/approvals/{approval_id}", {"decision": "deny"})
        assert response.status_code == 200
        await tg.until(lambda: "denied" in asked.text)
        assert asked.reply_markup is None
        assert await tg.until(answer_message(tg, "OK, I left it."))

    async def test_a_forged_or_foreign_button_is_refused(self, tg, linked, other_user, bot, llm):
        await TelegramLink.objects.acreate(user=other_user, telegram_user_id=OTHER_TG, chat_id=OTHER_TG)
        script_terminal(llm, "risky")
        tg.push_text(OWNER_TG, "risky")
        asked = await tg.until(answer_message(tg, "wants to run terminal"))
        data = approve_button(asked)
        tg.push_callback(OTHER_TG, data, asked.message_id, chat_id=OTHER_TG)  # another linked user
        tg.push_callback(STRANGER_TG, data, asked.message_id, chat_id=STRANGER_TG)  # someone unlinked
        tg.push_callback(OWNER_TG, "a:" + "0" * 32 + ":y", asked.message_id)  # an approval that does not exist
        answers = await tg.until(lambda: len(tg.calls_of("answerCallbackQuery")) == 3 and tg.calls_of("answerCallbackQuery"))
        assert ["not yours" in a.params["text"] or "only answers its owner" in a.params["text"] for a in answers] == [True] * 3
        record = await ToolCallRecord.objects.aget(tool="terminal")
        assert record.decision == "pending"
        tg.push_callback(OWNER_TG, data.replace(":y", ":n"), asked.message_id)  # the owner ends it
        await tg.until(lambda: "denied" in asked.text)


class TestFiles:
    async def test_a_photo_goes_to_the_model(self, tg, linked, bot, llm):
        file_id = tg.add_file(PNG, "photos/file_1.png")
        photo = [{"file_id": file_id, "file_unique_id": "p1", "width": 1, "height": 1, "file_size": len(PNG)}]
        tg.push_text(OWNER_TG, "what is this?", photo=photo)
        await tg.until(answer_message(tg, "echo: what is this?"))
        user = [m for m in llm.requests[-1]["messages"] if m["role"] == "user"][-1]
        assert user["images"] == [base64.b64encode(PNG).decode()]

    async def test_a_document_in_and_a_published_file_out(self, tg, linked, bot, llm):
        file_id = tg.add_file(b"shopping: milk, eggs\n", "documents/file_2.txt")
        document = {"file_id": file_id, "file_unique_id": "d1", "file_name": "notes.txt", "mime_type": "text/plain",
                    "file_size": 21}
        llm.add_rule(Rule(match="publish it", turns=[
            Turn(tool_calls=[{"name": "content_publish", "arguments": {"name": "notes.txt"}}]), Turn(content="Here it is."),
        ]))
        tg.push_text(OWNER_TG, "publish it", document=document)
        await tg.until(answer_message(tg, "Here it is."))
        assert "notes.txt" in [m for m in llm.requests[0]["messages"] if m["role"] == "user"][-1]["content"]
        sent = await tg.until(lambda: [m for m in tg.messages_to(OWNER_TG) if m.kind == "document"])
        assert sent[0].file == ("notes.txt", b"shopping: milk, eggs\n")

    async def test_a_50_mb_file_is_refused_with_a_message(self, tg, linked, bot, llm):
        document = {"file_id": "big", "file_unique_id": "b1", "file_name": "video.mp4", "mime_type": "video/mp4",
                    "file_size": 50 * 1024 * 1024}
        tg.push_text(OWNER_TG, "keep this", document=document)
        refusal = await tg.until(answer_message(tg, "too large"))
        assert "20 MB" in refusal.text
        assert tg.calls_of("getFile") == [] and llm.requests == []


class TestTelegramFailures:
    async def test_unreachable_telegram_is_retried_with_back_off_and_shown_on_health(self, tg, linked, bot, owner_client):
        waits: list[float] = []  # the pauses the poller asks for (measured gaps would be the machine's load)
        pause = bot.poller._pause

        async def recorded(seconds: float) -> None:
            waits.append(seconds)
            await pause(seconds)

        bot.poller._pause = recorded
        await tg.until(lambda: tg.calls_of("getUpdates"))
        tg.fail("getUpdates", 502, times=3, description="Bad Gateway")
        tg.push_text(OWNER_TG, "/help")
        await tg.until(lambda: len(tg.calls_of("getUpdates")) >= 4)
        health = (await request(owner_client, "get", "/health")).json()
        assert health["status"] == "degraded" and "cannot reach Telegram" in health["telegram"]
        await tg.until(answer_message(tg, "Commands"))
        await tg.until(lambda: tg.confirmed() >= 2)
        assert len([t for t in texts(tg) if "Commands" in t]) == 1  # handled once, nothing lost
        assert await offset() == 2
        await tg.until(lambda: len(tg.calls_of("getUpdates")) >= 5)  # through the outage
        assert waits[:3] == [0.3, 0.6, 1.2]  # one wait per failure, each twice the last
        await _eventually(lambda: request(owner_client, "get", "/health"), lambda r: r.json()["telegram"] == "ok")

    async def test_a_revoked_token_is_a_clear_error_in_the_log_and_on_settings(self, tg, owner_client, caplog):
        tg.revoked = True
        service = TelegramService(holder="worker-a", lease_s=5, poll_timeout=1)
        with caplog.at_level(logging.ERROR, logger="navi.telegram"):
            service.start()
            try:
                await tg.until(lambda: tg.calls_of("getMe"))
                shown = await _eventually(lambda: request(owner_client, "get", "/settings/telegram"),
                                          lambda r: r.json()["error"])
            finally:
                await service.stop()
        assert "revoked" in shown.json()["error"] and "@BotFather" in shown.json()["error"]
        assert tg.token not in shown.json()["error"]
        assert any("revoked" in r.getMessage() for r in caplog.records if r.levelno == logging.ERROR)
        health = (await request(owner_client, "get", "/health")).json()
        assert health["status"] == "degraded" and "revoked" in health["telegram"]
        response = await request(owner_client, "post", "/settings/telegram/link")  # no bot name to link to
        assert response.status_code == 503 and "revoked" in response.json()["error"]


def _async(value):
    async def get():
        return value()

    return get


async def _eventually(make, check, timeout: float = 10):
    """Repeat `make()` until `check(result)` holds (a state another task writes)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        result = await make()
        if check(result):
            return result
        assert asyncio.get_running_loop().time() < deadline, "condition not met in time"
        await asyncio.sleep(0.1)


class TestTwoWorkers:
    async def test_one_worker_polls_and_the_other_takes_over_when_it_dies(self, tg, linked, owner_client, llm):
        a = TelegramService(holder="worker-a", lease_s=2, poll_timeout=1)
        b = TelegramService(holder="worker-b", lease_s=2, poll_timeout=1)
        a.start()
        await tg.until(lambda: tg.calls_of("getUpdates"))
        b.start()
        try:
            tg.push_text(OWNER_TG, "/help")
            await tg.until(answer_message(tg, "Commands"))
            await _eventually(_async(lambda: b.poller.standby_checks), lambda n: n >= 2)  # b found the lease taken
            assert (a.poller.polling, b.poller.polling) == (True, False)
            assert (await BotState.objects.aget(name="telegram")).lease_holder == "worker-a"

            a.poller.task.cancel()  # worker-a dies: no clean hand-over, its lease just stops being renewed
            tg.push_text(OWNER_TG, "/frobnicate 1")
            tg.push_text(OWNER_TG, "/frobnicate 2")
            await tg.until(lambda: len([t for t in texts(tg) if "Unknown command" in t]) == 2, timeout=20)
            await tg.until(lambda: tg.confirmed() >= 4)
            assert b.poller.polling
            assert (await BotState.objects.aget(name="telegram")).lease_holder == "worker-b"
            replies = [t for t in texts(tg) if "Commands" in t]
            assert len(replies) == 3  # /help once, each /frobnicate once: nothing lost or repeated
            assert await offset() == 4
        finally:
            await b.stop()
            await a.stop()


class TestWebhook:
    @pytest.fixture
    async def hooked(self, tg, linked, owner_client, llm, settings):
        settings.TELEGRAM_MODE = "webhook"
        settings.NAVI_HTTPS = True
        settings.TELEGRAM_WEBHOOK_URL = "https://navi.example.org/telegram/webhook"
        service = await start_service()
        yield service
        await stop_service()
        await runs_finished()

    async def test_updates_come_by_webhook_with_the_secret_header_once(self, tg, hooked):
        registered = (await tg.until(lambda: tg.calls_of("setWebhook")))[0].params
        assert registered["url"] == "https://navi.example.org/telegram/webhook"
        secret = registered["secret_token"]
        client = AsyncClient()
        update = {"update_id": 50, "message": tg.message(STRANGER_TG, "hi")}

        forged = await client.post("/telegram/webhook", update, content_type="application/json",
                                   headers={"X-Telegram-Bot-Api-Secret-Token": "guess"})
        assert forged.status_code == 403
        assert tg.messages_to(STRANGER_TG) == []

        for _ in range(2):  # Telegram redelivers: handled once
            response = await client.post("/telegram/webhook", update, content_type="application/json",
                                         headers={"X-Telegram-Bot-Api-Secret-Token": secret})
            assert response.status_code == 200
        owner_update = {"update_id": 51, "message": tg.message(OWNER_TG, "over the hook")}
        await client.post("/telegram/webhook", owner_update, content_type="application/json",
                          headers={"X-Telegram-Bot-Api-Secret-Token": secret})
        assert await tg.until(answer_message(tg, "echo: over the hook"))
        assert len(tg.messages_to(STRANGER_TG)) == 1 and "private Navi assistant" in tg.messages_to(STRANGER_TG)[0].text
        assert tg.calls_of("getUpdates") == []  # no polling in webhook mode

    async def test_webhook_mode_needs_https_and_a_public_url(self, tg, linked, owner_client, settings):
        settings.TELEGRAM_MODE = "webhook"
        settings.NAVI_HTTPS = False
        await start_service()
        try:
            shown = await _eventually(lambda: request(owner_client, "get", "/settings/telegram"), lambda r: r.json()["error"])
        finally:
            await stop_service()
        assert "NAVI_HTTPS" in shown.json()["error"] and tg.calls_of("setWebhook") == []


class TestThePageAndNotifications:
    async def test_the_page_shows_a_telegram_turn_live(self, tg, linked, owner_token, llm, bot):
        tg.push_text(OWNER_TG, "/new")
        await tg.until(answer_message(tg, "New chat started"))
        session = await chat_session()
        comm = connect(session.pk, token=owner_token)  # a tab open on that chat
        assert (await comm.connect(timeout=10))[0]
        try:
            tg.push_text(OWNER_TG, "from my phone")
            frames = []
            while not frames or frames[-1]["type"] != "stream_end":
                frames.append(json.loads(await comm.receive_from(timeout=15)))
        finally:
            await comm.disconnect()
        start = next(f for f in frames if f["type"] == "stream_start")
        assert start["user_message"] == "from my phone"
        assert frames[-1]["content"] == "echo: from my phone"

    async def test_send_to_owner_reaches_the_linked_chat_only(self, tg, linked, owner, other_user):
        assert await send_to_owner(owner.pk, "Routine **done**") == {"ok": True, "error": ""}
        assert tg.messages_to(OWNER_TG)[-1].text == "Routine <b>done</b>"
        result = await send_to_owner(other_user.pk, "hello")
        assert result["ok"] is False and "no Telegram account is linked" in result["error"]
        tg.revoked = True
        failed = await send_to_owner(owner.pk, "again")
        assert failed["ok"] is False and failed["error"]


@pytest.mark.django_db(transaction=True)
class TestTelegramAsANotificationTarget:
    async def test_a_routine_result_reaches_the_linked_chat(self, tg, linked, owner, owner_client):
        from notify_app.delivery import notify_user

        response = await request(owner_client, "post", "/settings/notify", {"kind": "telegram"})
        assert response.status_code == 201, response.content
        [outcome] = await notify_user(owner.id, title="Stretch", body="Time to **stretch**.", url="/#x")
        assert outcome["kind"] == "telegram" and outcome["ok"], outcome
        [message] = tg.messages_to(OWNER_TG)
        assert "Stretch" in message.text and "<b>stretch</b>" in message.text

    async def test_without_a_link_the_delivery_fails_readably(self, tg, owner, owner_client):
        from notify_app.delivery import notify_user

        assert (await request(owner_client, "post", "/settings/notify", {"kind": "telegram"})).status_code == 201
        [outcome] = await notify_user(owner.id, title="t", body="b", url="/")
        assert not outcome["ok"] and "Settings" in outcome["error"]
        assert tg.messages_to(OWNER_TG) == []

    def test_it_needs_a_bot_token(self, owner_client, settings):
        settings.TELEGRAM_BOT_TOKEN = ""
        response = owner_client.post("/settings/notify", {"kind": "telegram"}, content_type="application/json")
        assert response.status_code == 400 and "TELEGRAM_BOT_TOKEN" in response.json()["error"]
