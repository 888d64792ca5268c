"""First run and daily use (issue #38) in a real browser: a fresh install whose configured model
is not on the server picks an installed one and chats, the chat's model picker, pulling a model
with progress, the empty state; desktop and phone, both themes, axe at 0 serious findings."""

from __future__ import annotations

import json
import re
import shutil

import pytest
from playwright.sync_api import expect

from tests.browser.test_daily import DIRECT, axe_serious, open_chat, send
from tests.browser_support import CHROMIUM, screenshot
from tests.live_server import LiveNavi
from tests.llm_server import LLMServer

pytestmark = pytest.mark.skipif(not shutil.which(CHROMIUM), reason="needs Debian's chromium (apt-get install chromium)")

INSTALLED = ["qwen2.5:0.5b", "llama3.2:1b"]
FIRST, OTHER = "llama3.2:1b", "qwen2.5:0.5b"  # the page preselects the first by name
DESKTOP = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}


@pytest.fixture(scope="module")
def live_llm():
    """A server that has two small models, not the shipped default."""
    with LLMServer(models=list(INSTALLED)) as server:
        yield server


@pytest.fixture(scope="module")
def navi(live_llm):
    env = {"OLLAMA_HOST": live_llm.url, "CHAT_TITLES": "first_words", "OLLAMA_DEFAULT_MODEL": "gemma4:e2b-it-q8_0"}
    with LiveNavi(env=env) as server:
        yield server


@pytest.fixture
def llm(live_llm):
    live_llm.reset()
    live_llm.models = list(INSTALLED)
    live_llm.unpullable.clear()
    live_llm.pull_delay = 0.0
    live_llm.add_rule(DIRECT)
    return live_llm


def _page(browser, login_state, viewport=DESKTOP, scheme="light"):
    context = browser.new_context(storage_state=login_state, viewport=viewport, color_scheme=scheme)
    page = context.new_page()
    page.on("dialog", lambda dialog: dialog.accept())
    return context, page


def _session(navi, sid):
    with navi.api() as client:
        return client.get(f"/sessions/{sid}").json()


@pytest.mark.parametrize("scheme", ["light", "dark"])
@pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["desktop", "phone"])
def test_a_fresh_install_answers_with_an_installed_model_and_says_so_once(browser, login_state, navi, llm, scheme, viewport):
    """The default is not on the server: the server answers with its first chat model (issue #53:
    the same rule as REST and routines), the page says so once, and the chat's own pick stays empty."""
    context, page = _page(browser, login_state, viewport, scheme)
    try:
        sid = open_chat(page, navi)
        notice = page.locator("#model-notice")
        expect(notice).to_contain_text("gemma4:e2b-it-q8_0")
        expect(notice).to_contain_text(FIRST)
        expect(notice.get_by_role("link", name="Choose the default model in Settings")).to_be_visible()
        expect(page.locator("#chat-model")).to_have_value("")
        expect(page.locator("#chat-model option[value='']")).to_have_text(f"Default ({FIRST})")
        # The picker lists what the server has (and the owner's way to pull another).
        values = page.locator("#chat-model option").evaluate_all("os => os.map(o => o.value)")
        assert sorted(v for v in values if v not in ("", "__pull__")) == sorted(INSTALLED) and "__pull__" in values
        name = f"firstrun-01-stand-in-{'phone' if viewport is PHONE else 'desktop'}-{scheme}"
        screenshot(page, name)
        assert axe_serious(page) == []
        send(page, "hello there")
        expect(page.locator(".bubble.assistant").last).to_have_text("echo: hello there")
        assert {r["model"] for r in llm.requests} == {FIRST} and _session(navi, sid)["model"] == ""
        # Closed, it stays closed.
        page.get_by_role("button", name="Close this notice").click()
        expect(notice).to_be_hidden()
        page.reload()
        page.wait_for_selector("body[data-ready='1']")
        expect(page.locator("#chat-model option[value='']")).to_have_text(f"Default ({FIRST})")
        expect(notice).to_be_hidden()
        # Pick the other installed model: the chat answers with it.
        page.select_option("#chat-model", OTHER)
        page.wait_for_function("([sid, m]) => fetch(`/sessions/${sid}`).then(r => r.json()).then(s => s.model === m)", arg=[sid, OTHER])
        send(page, "hello again")
        expect(page.locator(".bubble.assistant").last).to_have_text("echo: hello again")
        assert {r["model"] for r in llm.requests if "hello again" in json.dumps(r["messages"][-1:])} == {OTHER}
        expect(page.locator("#chat-model")).to_have_value(OTHER)
    finally:
        context.close()


def test_over_rest_a_missing_default_is_stood_in_for_and_a_picked_model_answers(navi, llm):
    """The same first run without the page (the README's script): the message is answered by the
    server's first chat model, and the answer's meta says why; PATCH then picks another."""
    with navi.api() as client:
        listing = client.get("/models").json()
        assert listing["default"] == "gemma4:e2b-it-q8_0" and listing["stand_in"] == FIRST
        assert sorted(m["name"] for m in listing["models"] if m["backend"] == "ollama") == sorted(INSTALLED)
        sid = client.post("/sessions", json={}).json()["session_id"]
        first = client.post(f"/sessions/{sid}/messages", json={"content": "hello before picking"})
        assert first.status_code == 200, first.text
        assert first.json()["content"] == "echo: hello before picking"
        answer = [m for m in client.get(f"/sessions/{sid}").json()["messages"] if m["role"] == "assistant"][-1]
        assert answer["meta"]["model"] == FIRST and "gemma4:e2b-it-q8_0" in answer["meta"]["model_note"]
        assert client.patch(f"/sessions/{sid}", json={"model": "gone:1b"}).status_code == 400
        picked = client.patch(f"/sessions/{sid}", json={"model": OTHER})
        assert picked.status_code == 200 and picked.json()["model"] == OTHER
        before = len(llm.requests)
        answer = client.post(f"/sessions/{sid}/messages", json={"content": "hello after picking"})
        assert answer.status_code == 200, answer.text
        assert answer.json()["content"] == "echo: hello after picking"
        assert {r["model"] for r in llm.requests[before:]} == {OTHER}
        assert client.get(f"/sessions/{sid}").json()["model"] == OTHER


def test_the_picker_offers_no_embedding_model_to_chat_with(browser, login_state, navi, llm):
    """Navi's own embedding model is often the first one pulled; it cannot chat: shown, disabled."""
    llm.models = ["embeddinggemma:latest", "nomic-embed-text:latest", OTHER]
    context, page = _page(browser, login_state, PHONE, "light")
    try:
        sid = open_chat(page, navi)
        expect(page.locator("#model-notice")).to_contain_text(f"uses “{OTHER}”")
        embed = page.locator("#chat-model option[value='nomic-embed-text:latest']")
        expect(embed).to_be_disabled()
        expect(embed).to_contain_text("embeddings only")
        send(page, "hello")
        expect(page.locator(".bubble.assistant").last).to_have_text("echo: hello")
        assert {r["model"] for r in llm.requests} == {OTHER} and _session(navi, sid)["model"] == ""
        llm.models = ["nomic-embed-text:latest"]
        page.reload()
        open_chat(page, navi)
        expect(page.locator("#model-notice")).to_contain_text("only embedding models")
        expect(page.locator(".pull-form input")).to_be_visible()
        screenshot(page, "firstrun-16-embedding-only-phone-light")
    finally:
        context.close()


def test_a_model_the_server_lost_is_refused_with_a_toast(browser, login_state, navi, llm):
    context, page = _page(browser, login_state)
    try:
        sid = open_chat(page, navi)
        expect(page.locator("#chat-model")).to_have_value("")
        page.evaluate("""() => { const s = document.querySelector('#chat-model');
            s.append(new Option('gone:1b', 'gone:1b')); s.value = 'gone:1b'; s.dispatchEvent(new Event('change')); }""")
        expect(page.locator("#toast .toast")).to_contain_text("has no model 'gone:1b'")
        expect(page.locator("#chat-model")).to_have_value("")
        assert _session(navi, sid)["model"] == ""
    finally:
        context.close()


@pytest.mark.parametrize("scheme", ["light", "dark"])
@pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["desktop", "phone"])
def test_an_empty_server_shows_how_to_start_and_the_owner_pulls_with_progress(browser, login_state, navi, llm, scheme, viewport):
    llm.models = []
    llm.pull_delay = 0.4
    context, page = _page(browser, login_state, viewport, scheme)
    tag = f"{'phone' if viewport is PHONE else 'desktop'}-{scheme}"
    try:
        sid = open_chat(page, navi)
        notice = page.locator("#model-notice")
        expect(notice).to_contain_text("no models yet")
        expect(page.locator(".pull-form input")).to_be_focused()
        expect(page.locator("#welcome-title")).to_be_in_viewport()  # the welcome below it starts at its top
        assert axe_serious(page) == []
        assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1")
        screenshot(page, f"firstrun-02-empty-{tag}")
        page.fill(".pull-form input", "qwen2.5:0.5b")
        page.click(".pull-form button[type=submit]")
        expect(page.locator(".pull-form progress")).to_be_visible()
        page.wait_for_function("() => { const p = document.querySelector('.pull-form progress'); return p && p.value > 0 && p.value < 1; }")
        expect(page.locator(".pull-status")).to_contain_text("%")
        screenshot(page, f"firstrun-03-pulling-{tag}")
        expect(notice).to_contain_text("Pulled qwen2.5:0.5b")
        expect(page.locator("#chat-model")).to_have_value("qwen2.5:0.5b")
        assert llm.pulls == ["qwen2.5:0.5b"]
        assert _session(navi, sid)["model"] == "qwen2.5:0.5b"
        send(page, "now answer")
        expect(page.locator(".bubble.assistant").last).to_have_text("echo: now answer")
    finally:
        context.close()


def test_a_failed_pull_says_what_to_do(browser, login_state, navi, llm):
    llm.models = []
    llm.unpullable.add("no-such-model")
    context, page = _page(browser, login_state)
    try:
        open_chat(page, navi)
        page.fill(".pull-form input", "no-such-model")
        page.click(".pull-form button[type=submit]")
        expect(page.locator("#toast .toast")).to_contain_text("file does not exist")
        expect(page.locator("#toast .toast")).to_contain_text("try again")
        expect(page.locator(".pull-form button[type=submit]")).to_be_enabled()
    finally:
        context.close()


def test_a_plain_user_sees_no_pull_and_is_refused(browser, navi, llm):
    token = navi.add_user("guest")
    with navi.api() as client:
        client.headers["Authorization"] = f"Bearer {token}"
        assert client.get("/models").json()["can_pull"] is False
        response = client.post("/models/pull", json={"name": "qwen2.5:0.5b"})
        assert response.status_code == 403, json.dumps(response.json())
    assert llm.pulls == []


# --- 3. routines in plain words ------------------------------------------------------------------
@pytest.mark.parametrize("scheme", ["light", "dark"])
@pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["desktop", "phone"])
def test_a_routine_in_plain_words_with_a_live_preview(browser, login_state, navi, llm, scheme, viewport):
    context = browser.new_context(storage_state=login_state, viewport=viewport, color_scheme=scheme,
                                  timezone_id="Europe/Berlin", locale="en-GB")
    page = context.new_page()
    tag = f"{'phone' if viewport is PHONE else 'desktop'}-{scheme}"
    try:
        page.goto(f"{navi.url}/routines/")
        expect(page.locator("#r-zone")).to_have_value("Europe/Berlin")  # guessed from the browser
        expect(page.locator("#zone-hint")).to_contain_text("Guessed from this browser")
        preview = page.locator("#when-preview")
        expect(preview.locator("li")).to_have_count(3)
        expect(preview).to_contain_text("every weekday at 08:00 (cron 0 8 * * 1-5)")
        expect(preview.locator("li").first).to_contain_text("08:00")
        page.fill("#r-when", "every Monday and Thursday at 18:00")
        expect(preview).to_contain_text("cron 0 18 * * 1,4")
        for item in preview.locator("li").all():
            assert "18:00" in item.inner_text() and ("Mon" in item.inner_text() or "Thu" in item.inner_text())
        page.fill("#r-when", "whenever the moon is full")
        expect(preview).to_contain_text("cannot read")
        expect(page.locator("#r-when")).to_have_attribute("aria-invalid", "true")
        screenshot(page, f"firstrun-04-routine-words-error-{tag}")
        page.get_by_role("button", name="Every 2 hours").click()
        expect(preview).to_contain_text("every 2 hours")
        expect(page.locator("#r-when")).to_be_focused()
        page.fill("#r-when", "every Monday and Thursday at 18:00")
        expect(preview).to_contain_text("cron 0 18 * * 1,4")
        page.fill("#r-name", f"Stretch {tag}")
        page.fill("#r-instruction", "Remind me to stretch.")
        screenshot(page, f"firstrun-05-routine-words-{tag}")
        assert axe_serious(page) == []
        page.click("#r-save")
        item = page.locator(".routine", has_text=f"Stretch {tag}")
        expect(item).to_be_visible()
        expect(item.locator(".fires li")).to_have_count(3)
        with navi.api() as client:
            saved = [r for r in client.get("/routines").json()["routines"] if r["name"] == f"Stretch {tag}"][0]
        assert saved["schedule"] == {"cron": "0 18 * * 1,4"} and saved["time_zone"] == "Europe/Berlin"
        expect(page.locator("#r-when")).to_have_value("every weekday at 8")  # a fresh form again
    finally:
        context.close()


# --- 4. a routine's turn is the routine's -----------------------------------------------------
@pytest.mark.parametrize("scheme", ["light", "dark"])
@pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["desktop", "phone"])
def test_a_routines_turn_is_marked_and_links_to_the_routine(browser, login_state, navi, llm, scheme, viewport):
    from tests.browser.test_routines import wait_for_run
    from tests.llm_server import Rule, Turn

    tag = f"{'phone' if viewport is PHONE else 'desktop'}-{scheme}"
    llm.models = None  # a server that has the profile's model (a routine's chat has no model of its own)
    llm.add_rule(Rule(match="Remind me to stretch", turns=[Turn(content="Time to stretch!")]))
    with navi.api() as client:
        routine = client.post("/routines", json={"name": f"Stretch {tag}", "instruction": "Remind me to stretch.",
                                                 "schedule": {"every_s": 86400}}).json()
        assert client.post(f"/routines/{routine['id']}/run").status_code == 202
    run = wait_for_run(navi, routine["id"])
    assert run["status"] == "ok"
    context, page = _page(browser, login_state, viewport, scheme)
    try:
        open_chat(page, navi, run["session_id"])
        turn = page.locator(".group.routine-turn")
        expect(turn.locator(".routine-mark")).to_contain_text(f"Routine “Stretch {tag}” ran at")
        expect(turn.locator(".routine-mark time")).to_have_text(re.compile(r"\d{1,2}:\d{2}"))
        expect(turn.locator("button.edit")).to_have_count(0)  # not the owner's words to edit
        expect(turn.locator("button.copy-message")).to_have_count(1)
        expect(page.locator(".bubble.assistant").last).to_have_text("Time to stretch!")
        assert axe_serious(page) == []
        screenshot(page, f"firstrun-06-routine-turn-{tag}")
        turn.locator(".routine-mark a").click()
        page.wait_for_url(f"**/routines/#routine-{routine['id']}")
        expect(page.locator(f"#routine-{routine['id']}")).to_have_class(re.compile("linked"))
    finally:
        context.close()


# --- 2. the welcome of an empty chat ---------------------------------------------------------------
@pytest.mark.parametrize("scheme", ["light", "dark"])
@pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["desktop", "phone"])
def test_an_empty_chat_welcomes_with_examples_one_click_sends(browser, login_state, navi, llm, scheme, viewport):
    context, page = _page(browser, login_state, viewport, scheme)
    tag = f"{'phone' if viewport is PHONE else 'desktop'}-{scheme}"
    try:
        sid = open_chat(page, navi)
        examples = page.locator("#welcome button.example")
        expect(examples).to_have_count(5)
        for kind in ("Files", "Web", "Routines", "Memory", "Documents"):
            expect(page.locator("#welcome")).to_contain_text(kind)
        # It opens at its top, under the model notice: the heading and the first example are in view.
        expect(page.locator("#model-notice")).to_be_visible()
        expect(page.locator("#welcome-title")).to_be_in_viewport()
        expect(examples.first).to_be_in_viewport(ratio=1)
        assert axe_serious(page) == []
        screenshot(page, f"firstrun-07-welcome-{tag}")
        examples.nth(1).focus()
        page.keyboard.press("Enter")  # keyboard works as a click does
        expect(page.locator("#welcome")).to_have_count(0)
        expect(page.locator(".group.user .text")).to_contain_text("Search the web")
        expect(page.locator(".bubble.assistant").last).to_contain_text("echo: Search the web")
        page.reload()
        page.wait_for_selector("body[data-ready='1']")
        expect(page.locator(".bubble.assistant")).to_have_count(1)
        expect(page.locator("#welcome")).to_have_count(0)  # not an empty chat any more
        assert [m["content"] for m in _session(navi, sid)["messages"] if m["role"] == "user"][0].startswith("Search the web")
    finally:
        context.close()


# --- 5. the phone header -------------------------------------------------------------------------
@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_the_phone_header_keeps_the_title_and_new_chat_is_one_tap(browser, login_state, navi, llm, scheme):
    context, page = _page(browser, login_state, PHONE, scheme)
    try:
        sid = open_chat(page, navi)
        send(page, "hello")  # not an empty chat: New chat makes another one (an empty one is reused)
        expect(page.locator(".bubble.assistant").last).to_have_text("echo: hello")
        long_title = "Planning the summer trip to Lisbon with Anna and the kids, flights and hotels"
        with navi.api() as client:
            client.patch(f"/sessions/{sid}", json={"title": long_title})
        page.reload()
        page.wait_for_selector("body[data-ready='1']")
        title = page.locator("#session-title")
        expect(title).to_be_visible()
        expect(title).to_have_text(long_title)
        box = title.bounding_box()
        assert box["width"] > 120 and box["x"] + box["width"] <= 390  # visible, inside the screen
        assert page.evaluate("(() => { const t = document.querySelector('#session-title'); return t.scrollWidth > t.clientWidth; })()")
        assert page.evaluate("getComputedStyle(document.querySelector('#session-title')).textOverflow") == "ellipsis"
        assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1")
        expect(page.locator("select[aria-label*='Profile' i]")).to_have_count(1)  # 7. one profile control
        new = page.locator("#header-new-chat")
        expect(new).to_be_visible()
        screenshot(page, f"firstrun-08-phone-header-{scheme}")
        assert axe_serious(page) == []
        new.click()
        page.wait_for_function("sid => location.hash && location.hash.slice(1) !== sid", arg=sid)
        expect(page.locator("#session-title")).to_have_text("New chat")
        expect(page.locator("#input")).to_be_focused()
    finally:
        context.close()


def test_the_desktop_header_leaves_new_chat_to_the_sidebar(browser, login_state, navi, llm):
    context, page = _page(browser, login_state)
    try:
        open_chat(page, navi)
        expect(page.locator("#header-new-chat")).to_be_hidden()
        expect(page.locator("#new-chat")).to_be_visible()
        # 7. one profile control (the chat's, in the header), not a second one for new chats
        expect(page.locator("select[aria-label*='Profile' i]")).to_have_count(1)
        expect(page.locator("#session-profile")).to_be_visible()
    finally:
        context.close()


# --- 6. hosts on your network, from Settings ------------------------------------------------------
@pytest.mark.parametrize("scheme", ["light", "dark"])
@pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["desktop", "phone"])
def test_the_owner_allows_a_lan_host_in_settings_and_it_works_at_once(browser, login_state, navi, llm, scheme, viewport):
    context, page = _page(browser, login_state, viewport, scheme)
    target = f"127.0.0.1:{llm.port}"  # a service on this machine (loopback: refused unless allowed)
    apprise = f"json://{target}/hook-{scheme}-{viewport['width']}"
    try:
        page.goto(f"{navi.url}/settings/")
        page.wait_for_selector("body[data-ready='1']")
        expect(page.locator("#hosts-empty")).to_be_visible()
        page.fill("#apprise-url", apprise)
        page.click("#new-apprise button[type=submit]")
        expect(page.locator("#toast .toast").last).to_contain_text("Hosts on your network")
        page.fill("#host-entry", target)
        page.press("#host-entry", "Enter")
        expect(page.locator("#host-warning")).to_contain_text("Allow only devices you trust")
        expect(page.locator("#hosts")).to_contain_text(target)
        expect(page.locator("#hosts")).to_contain_text("allowed by owner")
        # The same URL is accepted now: no restart, no environment variable.
        page.fill("#apprise-url", apprise)
        page.click("#new-apprise button[type=submit]")
        expect(page.locator("#notify-targets")).to_contain_text("json://")
        page.locator("#allowed-hosts").scroll_into_view_if_needed()
        screenshot(page, f"firstrun-09-allowed-hosts-{'phone' if viewport is PHONE else 'desktop'}-{scheme}")
        assert axe_serious(page) == []
        assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1")
        page.get_by_role("button", name=f"Remove {target}").click()
        expect(page.locator("#hosts-empty")).to_be_visible()
        expect(page.locator("#host-entry")).to_be_focused()
    finally:
        with navi.api() as client:  # leave the module's server as it was
            for t in client.get("/settings/notify").json().get("targets", []):
                client.delete(f"/settings/notify/{t['id']}")
        context.close()


def test_a_plain_user_sees_the_hosts_but_cannot_change_them(browser, navi, llm):
    from tests.browser_support import log_in

    token = navi.add_user("visitor")
    with navi.api() as client:
        client.post("/settings/allowed-hosts", json={"host": "nas.lan"}).raise_for_status()
    context = browser.new_context(viewport=DESKTOP)
    page = context.new_page()
    try:
        navi.username, owner = "visitor", navi.username
        try:
            log_in(page, navi)
        finally:
            navi.username = owner
        page.goto(f"{navi.url}/settings/")
        page.wait_for_selector("body[data-ready='1']")
        expect(page.locator("#hosts")).to_contain_text("nas.lan")
        expect(page.locator("#hosts-readonly")).to_be_visible()
        expect(page.locator("#host-add")).to_be_hidden()
        expect(page.locator("#hosts button")).to_have_count(0)
        with navi.api() as client:
            client.headers["Authorization"] = f"Bearer {token}"
            assert client.post("/settings/allowed-hosts", json={"host": "router.lan"}).status_code == 403
            assert client.delete("/settings/allowed-hosts/nas.lan").status_code == 403
    finally:
        with navi.api() as client:
            client.delete("/settings/allowed-hosts/nas.lan")
        context.close()


# --- 7. smaller things ----------------------------------------------------------------------------
def _rgb(page, selector):
    return page.evaluate(f"getComputedStyle(document.querySelector({selector!r})).backgroundColor")


@pytest.mark.parametrize("scheme", ["light", "dark"])
@pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["desktop", "phone"])
def test_message_times_show_on_hover_or_long_press(browser, login_state, navi, llm, viewport, scheme):
    context, page = _page(browser, login_state, viewport, scheme)
    try:
        open_chat(page, navi)
        send(page, "what time is it")
        expect(page.locator(".bubble.assistant").last).to_have_text("echo: what time is it")
        user_time = page.locator(".group.user .msg-time").last
        expect(user_time).to_be_hidden()
        if viewport is DESKTOP:
            page.locator(".group.user").last.hover()
        else:
            page.locator(".group.user .user-bubble").last.dispatch_event("contextmenu")  # what a long press sends
        expect(user_time).to_be_visible()
        expect(user_time).to_have_text(re.compile(r"^\d{1,2}:\d{2}"))
        assert user_time.get_attribute("datetime")
        page.reload()
        page.wait_for_selector("body[data-ready='1']")
        turn_time = page.locator(".group.turn .msg-time").last
        page.locator(".group.turn").last.hover()
        expect(turn_time).to_be_visible()
        assert turn_time.get_attribute("datetime").startswith(str(__import__("datetime").date.today().year))
        assert axe_serious(page) == []
        screenshot(page, f"firstrun-10-times-{'phone' if viewport is PHONE else 'desktop'}-{scheme}")
    finally:
        context.close()


@pytest.mark.parametrize("scheme", ["light", "dark"])
@pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["desktop", "phone"])
def test_an_imported_chat_is_marked_and_listed_first(browser, login_state, navi, llm, tmp_path, scheme, viewport):
    tag = f"{'phone' if viewport is PHONE else 'desktop'}-{scheme}"
    export = {"format": "navi.session", "version": 1,
              "session": {"title": f"Trip notes {tag}", "last_active": "2020-01-01T00:00:00+00:00"},
              "messages": [{"seq": 1, "role": "user", "content": "old question"},
                           {"seq": 2, "role": "assistant", "content": "old answer"}]}
    path = tmp_path / "trip.json"
    path.write_text(json.dumps(export), encoding="utf-8")
    context, page = _page(browser, login_state, viewport, scheme)
    try:
        sid = open_chat(page, navi)
        if viewport is PHONE:
            page.click("#menu")
        page.click("#import-button")  # the file chooser opens; the test hands it the file directly
        page.set_input_files("#import-file", str(path))
        page.wait_for_function("id => location.hash && location.hash.slice(1) !== id", arg=sid)
        expect(page.locator("#session-title")).to_have_text(f"Trip notes {tag} (imported)")
        if viewport is PHONE:  # the imported chat is opened as a picked one is: the drawer closes
            expect(page.locator("body")).not_to_have_class(re.compile("sidebar-open"))
            page.click("#menu")
        first = page.locator("#session-list li").first
        expect(first.locator(".session-title")).to_have_text(f"Trip notes {tag} (imported)")
        expect(first).to_be_visible()
        expect(first).to_have_class(re.compile("active"))
        assert axe_serious(page) == []
        screenshot(page, f"firstrun-12-imported-{tag}")
    finally:
        context.close()


@pytest.mark.parametrize("scheme", ["light", "dark"])
@pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["desktop", "phone"])
def test_a_search_snippet_opens_its_chat_and_pin_keeps_focus(browser, login_state, navi, llm, scheme, viewport):
    tag = f"{'phone' if viewport is PHONE else 'desktop'}-{scheme}"
    word = f"kumquat{viewport['width']}{scheme}"
    with navi.api() as client:
        sid = navi.create_session()
        client.patch(f"/sessions/{sid}", json={"model": FIRST}).raise_for_status()  # the default is not installed
        client.post(f"/sessions/{sid}/messages", json={"content": f"the {word} marmalade recipe"}).raise_for_status()
    context, page = _page(browser, login_state, viewport, scheme)
    try:
        open_chat(page, navi)
        if viewport is PHONE:
            page.click("#menu")
        page.fill("#search", word)
        snippet = page.locator(f"#session-list.results li[data-id='{sid}'] .snippet")
        expect(snippet).to_contain_text(word)
        assert axe_serious(page) == []
        screenshot(page, f"firstrun-13-search-{tag}")
        snippet.click()
        page.wait_for_function("sid => location.hash.slice(1) === sid", arg=sid)
        expect(page.locator(".messages > .group.search-hit")).to_contain_text(word)
        if viewport is PHONE:
            expect(page.locator("body")).not_to_have_class(re.compile("sidebar-open"))  # the chat is in view
            page.click("#menu")
        page.fill("#search", "")
        pin = page.locator(f"#session-list li[data-id='{sid}'] button.pin")
        pin.click()
        unpin = page.locator(f"#session-list li[data-id='{sid}'] button.pin")
        expect(unpin).to_have_attribute("aria-label", "Unpin")
        expect(unpin).to_be_focused()  # the list was redrawn; focus did not fall to the page
        page.keyboard.press("Enter")
        expect(page.locator(f"#session-list li[data-id='{sid}'] button.pin")).to_have_attribute("aria-label", "Pin")
        expect(page.locator(f"#session-list li[data-id='{sid}'] button.pin")).to_be_focused()
        screenshot(page, f"firstrun-14-pin-focus-{tag}")
    finally:
        context.close()


@pytest.mark.parametrize("scheme", ["light", "dark"])
@pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["desktop", "phone"])
def test_info_toasts_are_quiet_and_an_error_goes_after_a_successful_save(browser, login_state, navi, llm, scheme, viewport):
    tag = f"{'phone' if viewport is PHONE else 'desktop'}-{scheme}"
    context, page = _page(browser, login_state, viewport, scheme)
    try:
        with navi.api() as client:
            routine = client.post("/routines", json={"name": f"Quiet {tag}", "instruction": "say hi",
                                                     "schedule": {"every_s": 86400}}).json()
        page.goto(f"{navi.url}/routines/")
        page.locator(f"#routine-{routine['id']}").get_by_role("button", name="Run now").click()
        info = page.locator("#toast .toast.info")
        expect(info).to_contain_text("is running")
        assert "166, 27, 16" not in _rgb(page, "#toast .toast.info")  # not the error red
        assert info.get_attribute("role") == "status"
        assert axe_serious(page) == []
        screenshot(page, f"firstrun-11-info-toast-{tag}")
        # The page leaves room below its last routine: the toast is not over it when scrolled to the end.
        page.evaluate("window.scrollTo(0, document.body.scrollHeight)")
        last, toast = page.locator(".routine").last.bounding_box(), info.bounding_box()
        assert last["y"] + last["height"] <= toast["y"] or toast["x"] >= last["x"] + last["width"]
        # An error toast, then a successful save: the error goes.
        page.goto(f"{navi.url}/settings/")
        page.wait_for_selector("body[data-ready='1']")
        page.fill("#apprise-url", "nonsense://")
        page.click("#new-apprise button[type=submit]")
        expect(page.locator("#toast .toast.error")).to_be_visible()
        screenshot(page, f"firstrun-15-error-toast-{tag}")
        page.select_option("#theme", scheme)
        expect(page.locator("#prefs-status")).to_have_text("Saved.")
        expect(page.locator("#toast .toast.error")).to_have_count(0)
    finally:
        with navi.api() as client:
            client.delete(f"/routines/{routine['id']}")
            client.patch("/settings", json={"theme": "system"})  # the next test's page follows its own scheme
        context.close()
