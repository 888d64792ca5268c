"""First run, round 4 (issue #53) in a real browser: the owner sets the model server and the
default model from Settings, a routine that fails shows why and where to fix it, and the small
ones (pages without their slash, Debug for staff, a routine's words, phones). Each page is loaded
once and looked at in both themes at desktop and phone width (screenshots, axe)."""

from __future__ import annotations

import re
import shutil

import pytest
from playwright.sync_api import expect

from tests.browser.test_daily import DIRECT, axe_serious, open_chat
from tests.browser_support import CHROMIUM, LOOKS, log_in, looks, screenshot
from tests.live_server import LiveNavi
from tests.llm_server import LLMServer

pytestmark = pytest.mark.skipif(not shutil.which(CHROMIUM), reason="needs Debian's chromium (apt-get install chromium)")

MISSING = "gemma4:e2b-it-q8_0"
INSTALLED = ["nomic-embed-text:latest", "qwen2.5:0.5b", "llama3.2:1b"]


@pytest.fixture(scope="module")
def live_llm():
    with LLMServer(models=list(INSTALLED)) as server:
        yield server


@pytest.fixture(scope="module")
def navi(live_llm):
    env = {"OLLAMA_HOST": live_llm.url, "CHAT_TITLES": "first_words", "OLLAMA_DEFAULT_MODEL": MISSING}
    with LiveNavi(env=env) as server:
        yield server


@pytest.fixture
def llm(live_llm):
    live_llm.reset()
    live_llm.models = list(INSTALLED)
    live_llm.api_key = None
    live_llm.pull_steps, live_llm.pull_delay = 4, 0.0
    live_llm.add_rule(DIRECT)
    return live_llm


def test_the_owner_sets_up_the_servers_and_the_default_model_in_settings(browser, login_state, navi, llm):
    context = browser.new_context(storage_state=login_state, viewport=LOOKS[0][1])
    page = context.new_page()
    try:
        page.goto(f"{navi.url}/settings#connections")  # without the slash: the page, not its JSON
        page.wait_for_selector("body[data-ready='1']")
        assert page.url.endswith("/settings/#connections")
        missing = page.locator("#conn-default-missing")
        expect(missing).to_contain_text(f"“{MISSING}” is not on the server, so Navi uses “llama3.2:1b”")
        expect(page.locator("#conn-ollama-url")).to_have_value(llm.url.rstrip("/"))
        page.click("#conn-ollama-test")
        expect(page.locator("#conn-ollama-result")).to_contain_text("Reachable (version 0.12.0): 3 models, 1 only for embeddings")
        embed = page.locator("#conn-default option", has_text="nomic-embed-text")
        expect(embed).to_be_disabled()
        looks(page, "01-connections-missing", axe_serious, "#connections")
        # The default model, from the server's list: saved, and the next chat of a script uses it.
        page.select_option("#conn-default", "ollama\nqwen2.5:0.5b")
        expect(page.locator("#conn-status")).to_contain_text("Saved the default model (qwen2.5:0.5b)")
        expect(missing).to_be_hidden()
        with navi.api() as client:
            sid = client.post("/sessions", json={}).json()["session_id"]
            assert client.post(f"/sessions/{sid}/messages", json={"content": "hi"}).status_code == 200
        assert {r["model"] for r in llm.requests} == {"qwen2.5:0.5b"}
        # An OpenAI-compatible server with a key: tested, added, the key never shown back.
        llm.api_key = "sk-page-secret"
        page.fill("#conn-name", "lab")
        page.fill("#conn-base", llm.openai_url)
        page.fill("#conn-key", "sk-page-secret")
        page.click("#conn-add-test")
        expect(page.locator("#conn-add-result")).to_contain_text("Reachable")
        page.click("#conn-add button[type=submit]")
        row = page.locator("#conn-servers li", has_text="lab")
        expect(row).to_contain_text("key set (hidden)")
        expect(page.locator("#conn-key")).to_have_value("")
        assert "sk-page-secret" not in page.content()
        row.get_by_role("button", name="Test lab").click()
        expect(row.locator(".status")).to_contain_text("Reachable")
        looks(page, "02-connections-set", axe_serious, "#connections")
        row.get_by_role("button", name="Remove lab").click()
        expect(page.locator("#conn-servers-empty")).to_be_visible()
    finally:
        with navi.api() as client:
            client.patch("/settings", json={"default_model": "", "connections": {"openai": []}})
        context.close()


def test_a_plain_user_sees_the_connections_but_cannot_change_them(browser, navi, llm):
    navi.add_user("reader")
    context = browser.new_context(viewport=LOOKS[1][1])
    page = context.new_page()
    owner = navi.username
    try:
        navi.username = "reader"
        log_in(page, navi)
        page.goto(f"{navi.url}/settings/")
        page.wait_for_selector("body[data-ready='1']")
        expect(page.locator("#conn-readonly")).to_contain_text("Only the owner")
        expect(page.locator("#conn-models-form")).to_be_hidden()
        expect(page.locator("#conn-ollama-form")).to_be_hidden()
        page.goto(f"{navi.url}/")
        page.wait_for_selector("body[data-ready='1']")
        expect(page.locator("#debug-link")).to_have_count(0)  # Debug is the owner's
        assert page.goto(f"{navi.url}/debug").status == 403
    finally:
        navi.username = owner
        context.close()


def test_a_failed_routine_shows_why_and_where_to_fix_it(browser, login_state, navi, llm):
    with navi.api() as client:
        made = client.post("/routines", json={"name": "Digest", "instruction": "Write the digest.",
                                              "schedule": {"cron": "0 8 * * 1-5"}, "words": "every weekday at 8am",
                                              "time_zone": "Europe/Berlin"}).json()
        once = client.post("/routines", json={"name": "Dentist", "instruction": "Remind me of the dentist.",
                                              "schedule": {"at": "2030-01-02T09:00:00"}, "time_zone": "Europe/Berlin"}).json()
        client.post(f"/routines/{made['id']}/run").raise_for_status()
        run = _wait_run(client, made["id"], 1)
        assert run["status"] == "ok", run  # the missing default is stood in for
        client.patch(f"/sessions/{run['session_id']}", json={"model": "qwen2.5:0.5b"}).raise_for_status()
    llm.models = ["llama3.2:1b"]  # the server lost the chat's model
    with navi.api() as client:
        client.post(f"/routines/{made['id']}/run").raise_for_status()
        failed = _wait_run(client, made["id"], 2)
    assert failed["status"] == "failed" and "qwen2.5:0.5b" in failed["error"]
    context = browser.new_context(storage_state=login_state, viewport=LOOKS[0][1], timezone_id="Europe/Berlin",
                                  locale="en-GB")
    page = context.new_page()
    try:
        page.goto(f"{navi.url}/routines#routine-{made['id']}")
        card = page.locator(f"#routine-{made['id']}")
        expect(card.locator(".schedule-line")).to_contain_text("“every weekday at 8am”")
        expect(card.locator(".run-error")).to_contain_text("qwen2.5:0.5b")
        fix = card.locator(".run-error a")
        expect(fix).to_have_attribute("href", "/settings/#connections")
        one_shot = page.locator(f"#routine-{once['id']} .schedule-line")
        expect(one_shot).to_contain_text(re.compile(r"once, .*2 Jan 2030.*09:00"))
        looks(page, "03-routine-failed", axe_serious, f"#routine-{made['id']}")
    finally:
        with navi.api() as client:
            for rid in (made["id"], once["id"]):
                client.delete(f"/routines/{rid}")
        context.close()


def _wait_run(client, rid: int, count: int) -> dict:
    import time

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        runs = client.get(f"/routines/{rid}/runs").json()
        if len(runs) >= count and runs[0]["status"] not in ("running", "waiting_approval"):
            return runs[0]
        time.sleep(0.2)  # polling the server's state, not standing in for a sync point
    raise AssertionError(f"routine {rid} did not finish run {count}")


def test_the_small_ones_on_a_phone(browser, login_state, navi, llm):
    context = browser.new_context(storage_state=login_state, viewport=LOOKS[1][1])
    page = context.new_page()
    try:
        with navi.api() as client:
            for path in ("/knowledge", "/routines", "/settings", "/memory"):
                assert client.get(path).headers["content-type"].startswith("application/json"), path  # scripts
        for path in ("/knowledge", "/routines", "/memory"):
            page.goto(f"{navi.url}{path}")
            assert page.url == f"{navi.url}{path}/", path
        # The token table fits a phone, long names and all.
        with navi.api() as client:
            client.post("/settings/tokens", json={"name": "home-assistant-in-the-living-room-tablet"}).raise_for_status()
        page.goto(f"{navi.url}/settings/")
        page.wait_for_selector("body[data-ready='1']")
        expect(page.locator("#tokens tbody tr").first).to_contain_text("home-assistant")
        page.locator("#tokens").scroll_into_view_if_needed()
        screenshot(page, "setup-04-tokens-phone")
        assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1")
        # The chat: the profile menu fits, Debug is there for the owner, the documents example leads to Knowledge.
        open_chat(page, navi)
        box = page.locator("#session-profile").bounding_box()
        assert box["x"] >= 0 and box["x"] + box["width"] <= 390
        link = page.locator(".welcome a.example-link")
        expect(link).to_have_attribute("href", "/knowledge/")
        link.scroll_into_view_if_needed()
        looks(page, "05-welcome", axe_serious, ".welcome a.example-link")
        expect(page.locator("#debug-link")).to_be_visible()  # desktop again: the sidebar shows
    finally:
        context.close()


def test_pulling_from_the_picker_suggests_shows_progress_cancels_and_names_the_cause(browser, login_state, navi, llm):
    llm.models = []
    llm.pull_delay = 0.5
    llm.pull_steps = 40  # a long pull, to cancel
    context = browser.new_context(storage_state=login_state, viewport=LOOKS[0][1])
    page = context.new_page()
    try:
        open_chat(page, navi)
        form = page.locator(".pull-form")
        expect(form.locator(".pull-suggestions .chip")).to_have_count(3)
        form.get_by_role("button", name=re.compile(r"^qwen2.5:3b · 1.9 GB")).click()
        expect(form.locator("input")).to_have_value("qwen2.5:3b")
        assert "nomic-embed-text" in page.locator("#pull-suggestions").inner_html()  # the datalist has more
        form.locator("button[type=submit]").click()
        page.wait_for_function("() => { const p = document.querySelector('.pull-form progress'); return p && p.value > 0; }")
        looks(page, "07-pulling", axe_serious, "#model-notice")
        form.get_by_role("button", name="Cancel").click()
        expect(page.locator(".pull-status")).to_have_text("Cancelled the pull of qwen2.5:3b.")
        expect(form.locator("button[type=submit]")).to_be_enabled()
        deadline = page.evaluate("Date.now()") + 20000
        while "qwen2.5:3b" not in llm.pulls_cancelled and page.evaluate("Date.now()") < deadline:
            page.wait_for_timeout(100)  # (polls the fake server's record; Playwright runs meanwhile)
        assert llm.pulls_cancelled == ["qwen2.5:3b"] and llm.models == []
        # A server that cannot pull (a proxy, an OpenAI-compatible one): the server is named, not the model.
        llm.pull_status = 404
        form.locator("button[type=submit]").click()
        toast = page.locator("#toast .toast.error").last
        expect(toast).to_contain_text("cannot pull models (it answered /api/pull with HTTP 404)")
        assert "ollama.com/library" not in toast.inner_text()
    finally:
        context.close()
