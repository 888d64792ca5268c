"""The /routines/ page in real Chromium: create a routine, run it now, see its history and open
the chat it wrote in (marked unread in the sidebar until opened)."""

from __future__ import annotations

import shutil
import time

import pytest
from playwright.sync_api import expect

from tests.browser_support import CHROMIUM
from tests.llm_server import Rule, Turn

pytestmark = pytest.mark.skipif(not shutil.which(CHROMIUM), reason="needs Debian's chromium (apt-get install chromium)")
DIRECT = Rule(system="planning step", match="", turns=[Turn(content="DIRECT")])  # skip planning


@pytest.fixture
def page(browser, login_state, live_llm):
    live_llm.reset()
    live_llm.add_rule(DIRECT)
    context = browser.new_context(storage_state=login_state, viewport={"width": 1200, "height": 800})
    page = context.new_page()
    page.on("dialog", lambda dialog: dialog.accept())
    yield page
    context.close()


def wait_for_run(navi, routine_id: int, timeout: float = 30) -> dict:
    deadline = time.monotonic() + timeout
    with navi.api() as client:
        while time.monotonic() < deadline:
            runs = client.get(f"/routines/{routine_id}/runs").json()
            if runs and runs[0]["status"] not in ("running", "waiting_approval"):
                return runs[0]
            time.sleep(0.2)
    raise AssertionError("the routine's run did not finish")


def test_create_run_now_see_history_and_open_the_chat(page, navi, live_llm):
    live_llm.add_rule(Rule(match="Weather in Berlin", turns=[Turn(content="Sunny, 21 degrees.")]))
    page.goto(f"{navi.url}/routines/")
    expect(page.locator("#routines-empty")).to_be_visible()
    page.fill("#r-name", "Berlin weather")
    page.fill("#r-instruction", "Weather in Berlin?")
    page.select_option("#r-kind", "cron")
    page.fill("#r-cron", "0 8 * * 1-5")
    page.fill("#r-zone", "Europe/Berlin")
    page.press("#r-zone", "Enter")  # submits the form from the keyboard
    item = page.locator(".routine", has_text="Berlin weather")
    expect(item).to_be_visible()
    expect(item.locator(".fires li")).to_have_count(3)
    expect(item.locator(".fires li").first).to_contain_text("08:00")
    routine_id = int(item.get_attribute("data-id"))

    item.get_by_role("button", name="Run now").click()
    run = wait_for_run(navi, routine_id)
    assert run["status"] == "ok"
    page.reload()
    item = page.locator(".routine", has_text="Berlin weather")
    expect(item.locator(".last-run .status-ok")).to_have_text("ok")
    item.get_by_role("button", name="History").click()
    row = item.locator(".history tr").nth(1)
    expect(row).to_contain_text("ok")

    page.goto(f"{navi.url}/")
    marked = page.locator(f'#session-list li.unread[data-id="{run["session_id"]}"]')
    expect(marked).to_be_visible()
    expect(marked.locator(".unread-mark")).to_be_visible()
    page.goto(f"{navi.url}/routines/")
    item = page.locator(".routine", has_text="Berlin weather")
    item.get_by_role("button", name="History").click()
    item.locator(".history a", has_text="open chat").click()
    expect(page.locator(".messages")).to_contain_text("Sunny, 21 degrees.")
    expect(page.locator(".messages")).to_contain_text("Weather in Berlin?")
    expect(page.locator(f'#session-list li[data-id="{run["session_id"]}"]')).not_to_have_class("unread")


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_the_page_is_accessible_in_both_themes_and_fits_a_phone(browser, navi, login_state, live_llm, scheme):
    from tests.browser.test_daily import axe_serious

    with navi.api() as client:
        client.post("/routines", json={"name": f"Phone {scheme}", "instruction": "hello",
                                       "schedule": {"every_s": 3600}}).raise_for_status()
    context = browser.new_context(storage_state=login_state, color_scheme=scheme, viewport={"width": 390, "height": 800})
    page = context.new_page()
    try:
        page.goto(f"{navi.url}/routines/")
        item = page.locator(".routine", has_text=f"Phone {scheme}")
        expect(item).to_be_visible()
        item.get_by_role("button", name="History").click()
        expect(item.locator(".history")).to_be_visible()
        assert axe_serious(page) == []
        assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1")  # no sideways scrolling
        reached = set()  # keyboard only: Tab reaches the form and every action of a routine
        for _ in range(60):
            page.keyboard.press("Tab")
            reached.add(page.evaluate("document.activeElement.id || document.activeElement.textContent.trim()"))
        assert {"r-name", "r-instruction", "r-save", "Run now", "Pause", "Edit", "History", "Delete"} <= reached
    finally:
        context.close()


def test_a_routine_waiting_for_approval_is_approved_from_its_chat(page, navi, live_llm):
    live_llm.add_rule(Rule(match="count the files", turns=[
        Turn(tool_calls=[{"name": "terminal", "arguments": {"command": "ls"}}]), Turn(content="Counted them.")]))
    with navi.api() as client:
        created = client.post("/routines", json={"name": "Files", "instruction": "count the files",
                                                 "schedule": {"every_s": 86400}})
        routine_id = created.json()["id"]
        assert client.post(f"/routines/{routine_id}/run").status_code == 202
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            runs = client.get(f"/routines/{routine_id}/runs").json()
            if runs and runs[0]["status"] == "waiting_approval":
                break
            time.sleep(0.2)
        assert runs[0]["status"] == "waiting_approval"
    page.goto(f"{navi.url}/#{runs[0]['session_id']}")
    card = page.locator(".approval:not(.done)")
    expect(card).to_be_visible()
    expect(card.locator(".approval-title")).to_contain_text("terminal")
    card.locator("button.approve").click()
    expect(page.locator(".bubble.assistant").last).to_have_text("Counted them.")
    assert wait_for_run(navi, routine_id)["status"] == "ok"


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_deleting_a_running_routine_asks_whether_to_stop_its_run(browser, navi, login_state, live_llm, scheme):
    from tests.browser.test_daily import axe_serious

    live_llm.reset()
    live_llm.add_rule(DIRECT)
    live_llm.add_rule(Rule(match="count the files", turns=[
        Turn(tool_calls=[{"name": "terminal", "arguments": {"command": "ls"}}]), Turn(content="Counted them.")]))
    with navi.api() as client:
        routine_id = client.post("/routines", json={"name": f"Files {scheme}", "instruction": "count the files",
                                                    "schedule": {"every_s": 86400}}).json()["id"]
        assert client.post(f"/routines/{routine_id}/run").status_code == 202
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # the run waits for an approval: it is in progress
            runs = client.get(f"/routines/{routine_id}/runs").json()
            if runs and runs[0]["status"] == "waiting_approval":
                break
            time.sleep(0.2)
        assert runs[0]["status"] == "waiting_approval"
    context = browser.new_context(storage_state=login_state, color_scheme=scheme, viewport={"width": 390, "height": 800})
    page = context.new_page()
    try:
        page.goto(f"{navi.url}/routines/")
        item = page.locator(".routine", has_text=f"Files {scheme}")
        item.get_by_role("button", name="Delete").focus()
        page.keyboard.press("Enter")
        dialog = page.locator("#delete-dialog")
        expect(dialog).to_be_visible()
        expect(dialog).to_contain_text("is running now")
        expect(page.locator("#delete-cancel")).to_be_focused()  # the safe choice first
        assert axe_serious(page) == []
        page.keyboard.press("Escape")  # cancels: nothing deleted
        expect(dialog).to_be_hidden()
        expect(item).to_be_visible()
        item.get_by_role("button", name="Delete").focus()
        page.keyboard.press("Enter")
        expect(page.locator("#delete-cancel")).to_be_focused()
        page.keyboard.press("Shift+Tab")
        page.keyboard.press("Shift+Tab")
        assert page.evaluate("document.activeElement.id") == "delete-stop"
        page.keyboard.press("Enter")
        expect(item).to_have_count(0)
        with navi.api() as client:
            assert client.get(f"/routines/{routine_id}").status_code == 404
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:  # the stopped run lets go of its chat
                chat = client.get(f"/sessions/{runs[0]['session_id']}").json()
                if any(m["content"] == "Stopped." for m in chat["messages"]):
                    break
                time.sleep(0.2)
            assert [m["content"] for m in chat["messages"]][-1] == "Stopped."
            assert "Counted them." not in [m["content"] for m in chat["messages"]]
    finally:
        context.close()
