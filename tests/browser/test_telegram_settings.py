"""Connect Telegram on /settings, end to end: a real Navi server whose Telegram poller starts
from `server_started` against the fake Bot API server, the page's link code sent to the bot,
a message answered from the phone, and unlinking shutting the door again."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tests.browser_support import screenshot
from tests.live_server import LiveNavi
from tests.telegram_server import BOT_USERNAME, FakeTelegram

PHONE = 4242


@pytest.fixture(scope="module")
def tg():
    server = FakeTelegram().start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def navi(live_llm, tg):
    env = {"OLLAMA_HOST": live_llm.url, "CHAT_TITLES": "first_words", "TELEGRAM_BOT_TOKEN": tg.token,
           "TELEGRAM_API_URL": tg.url, "TELEGRAM_POLL_TIMEOUT_S": "1"}
    with LiveNavi(env=env) as server:
        yield server


@pytest.fixture
def page(browser, login_state, live_llm):
    live_llm.reset()
    context = browser.new_context(storage_state=login_state, viewport={"width": 1200, "height": 900})
    page = context.new_page()
    page.on("dialog", lambda dialog: dialog.accept())
    yield page
    context.close()


def replies(tg: FakeTelegram, fragment: str, chat_id: int = PHONE):
    return lambda: [m for m in tg.messages_to(chat_id) if fragment in m.text]


def test_the_owner_connects_telegram_chats_from_the_phone_and_unlinks(page, navi, tg, live_llm):
    page.goto(f"{navi.url}/settings/")
    page.wait_for_selector("body[data-ready='1']")
    expect(page.locator("#telegram-state")).to_have_text("Not linked yet.")
    page.click("#telegram-link")
    code_text = page.locator("#telegram-code code").inner_text()
    assert code_text.startswith("/start ")
    link = page.locator("#telegram-code a")
    expect(link).to_have_attribute("href", f"https://t.me/{BOT_USERNAME}?start={code_text.split()[1]}")
    screenshot(page, "telegram-settings-code")

    tg.push_text(PHONE, code_text, username="owner_phone")  # what the deep link makes the phone send
    tg.wait_for(replies(tg, "Linked"), timeout=30)
    page.reload()
    page.wait_for_selector("body[data-ready='1']")
    expect(page.locator("#telegram-state")).to_have_text("Linked to Telegram account @owner_phone.")

    tg.push_text(PHONE, "hello from the phone")
    tg.wait_for(replies(tg, "echo: hello from the phone"), timeout=30)

    page.click("#telegram-unlink")
    expect(page.locator("#telegram-state")).to_have_text("Not linked yet.")
    requests_before = len(live_llm.requests)
    tg.push_text(PHONE, "are you still there?")
    tg.wait_for(replies(tg, "private Navi assistant"), timeout=30)
    assert len(live_llm.requests) == requests_before
