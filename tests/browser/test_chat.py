"""The chat page in a real browser (Debian's Chromium via Playwright) against a live Navi
server and the protocol-level test LLM: what the owner sees and does."""

from __future__ import annotations

import re
import shutil

import httpx
import pytest
from playwright.sync_api import expect

from tests.browser_support import CHROMIUM, log_in, screenshot
from tests.llm_server import Rule, Turn, talk

pytestmark = pytest.mark.skipif(not shutil.which(CHROMIUM), reason="needs Debian's chromium (apt-get install chromium)")


@pytest.fixture
def page(browser, login_state, live_llm):
    live_llm.reset()
    context = browser.new_context(storage_state=login_state, viewport={"width": 1200, "height": 800})
    page = context.new_page()
    page.on("dialog", lambda dialog: dialog.accept())
    yield page
    context.close()


def open_new_chat(page, navi) -> str:
    page.goto(f"{navi.url}/")
    page.wait_for_selector("body[data-ready='1']")
    # New chat reuses your newest chat while it is empty (maybe the one shown): follow the answer.
    with page.expect_response(lambda r: r.url.endswith("/sessions") and r.request.method == "POST") as created:
        page.click("#new-chat")
    sid = created.value.json()["session_id"]
    page.wait_for_function("id => location.hash.slice(1) === id", arg=sid)
    page.wait_for_function("() => document.body.dataset.ready === '1' && window.navi && window.navi.socket.sessionId === location.hash.slice(1)")
    page.wait_for_function("() => window.navi.socket.ws.readyState === 1")
    return sid


def send(page, text: str) -> None:
    page.fill("#input", text)
    page.press("#input", "Enter")


def test_it_shows_the_login_page_and_logs_in(browser, navi):
    context = browser.new_context()
    page = context.new_page()
    page.goto(f"{navi.url}/")
    assert "/login/" in page.url
    screenshot(page, "01-login")
    page.fill("input[name=username]", navi.username)
    page.fill("input[name=password]", "wrong")
    page.click("button[type=submit]")
    expect(page.locator(".error")).to_contain_text("Wrong username or password")
    log_in(page, navi)
    expect(page.locator("#sidebar")).to_be_visible()
    context.close()


def test_it_streams_an_answer_into_a_new_chat(page, navi, live_llm):
    live_llm.add_rule(Rule(match="hello there", turns=[Turn(content="Hello! **Nice** to meet you.", chunk_size=3, delay=0.02)]))
    sid = open_new_chat(page, navi)
    send(page, "hello there")
    expect(page.locator(".group.user").last).to_contain_text("hello there")
    answer = page.locator(".bubble.assistant").last
    expect(answer).to_contain_text("Nice to meet you.")
    expect(answer.locator("strong")).to_have_text("Nice")
    expect(page.locator("#send")).to_be_visible()
    expect(page.locator("#context-meter .label")).to_contain_text("/ 8,192 tokens")
    expect(page.locator(f"#session-list li[data-id='{sid}'] .session-title")).to_have_text("hello there")
    screenshot(page, "02-streamed-answer")
    page.reload()
    page.wait_for_selector("body[data-ready='1']")
    expect(page.locator("#context-meter .label")).to_contain_text("/ 8,192 tokens")  # as live


RECORD_PENDING = """
window.__seen = {pendingTools: [], openThinking: 0};
new MutationObserver((mutations) => {
  for (const m of mutations) for (const n of m.addedNodes) {
    if (n.nodeType !== 1 || !n.matches) continue;
    if (n.matches('details.tool.pending')) window.__seen.pendingTools.push(n.dataset.tool);
    if (n.matches('details.thinking[open]')) window.__seen.openThinking += 1;
  }
}).observe(document, {childList: true, subtree: true});
"""


DIRECT = Rule(system="planning step", match="", turns=[Turn(content="DIRECT")])  # slow rules: skip planning


def last_turn(page):
    return page.locator(".group.turn").last


def test_tool_cards_go_from_pending_to_complete_and_mark_failures(page, navi, live_llm):
    live_llm.add_rule(Rule(match="list your tools", turns=[
        Turn(thinking="I need the tool list.", tool_calls=[{"name": "list_tools", "arguments": {}}]),
        # A valid call that fails (the default step writes only valid calls: a tool's name must be
        # a real one, so a missing file fails instead).
        Turn(tool_calls=[{"name": "filesystem", "arguments": {"action": "read", "path": "no_such_file.txt"}}]),
        Turn(content="All done."),
    ]))
    page.add_init_script(RECORD_PENDING)
    open_new_chat(page, navi)
    send(page, "list your tools")
    turn = last_turn(page)
    expect(turn.locator(".bubble.assistant")).to_have_text("All done.")
    ok = turn.locator("details.tool[data-tool=list_tools]")
    failed = turn.locator("details.tool[data-tool=filesystem]")
    expect(ok).to_have_class(re.compile(r"\bok\b"))
    expect(failed).to_have_class(re.compile(r"\bfailed\b"))
    expect(failed.locator(".tool-status")).to_have_text("failed")
    assert page.evaluate("window.__seen.pendingTools") == ["list_tools", "filesystem"]
    assert not ok.evaluate("d => d.open"), "tool cards start collapsed"
    # turn_thinking closes the live thinking block instead of adding a second one
    expect(turn.locator("details.thinking")).to_have_count(1)
    expect(turn.locator("details.thinking .thinking-body")).to_have_text("I need the tool list.")
    ok.locator("summary").click()
    expect(ok.locator(".tool-result")).to_contain_text("list_tools")
    screenshot(page, "03-tool-cards")
    # the same cards come back from the history after a reload
    page.reload()
    page.wait_for_selector("body[data-ready='1']")
    turn = last_turn(page)
    expect(turn.locator("details.tool[data-tool=list_tools]")).to_have_class(re.compile(r"\bok\b"))
    expect(turn.locator("details.tool[data-tool=filesystem]")).to_have_class(re.compile(r"\bfailed\b"))


def test_sub_agent_cards_nest_under_their_spawn_agent_card(page, navi, live_llm):
    live_llm.add_rule(Rule(match="delegate this", turns=[
        Turn(tool_calls=[{"name": "spawn_agent", "arguments": {"task": "subtask please"}}]),
        Turn(content="Delegated."),
    ]))
    live_llm.add_rule(Rule(match="subtask please", turns=[
        Turn(tool_calls=[{"name": "list_tools", "arguments": {}}]),
        Turn(content="sub result"),
    ]))
    open_new_chat(page, navi)
    send(page, "delegate this")
    turn = last_turn(page)
    expect(turn.locator(".bubble.assistant")).to_have_text("Delegated.")
    spawn = turn.locator("details.tool[data-tool=spawn_agent]")
    expect(spawn).to_have_class(re.compile(r"\bok\b"))
    nested = spawn.locator(".subagent details.tool[data-tool=list_tools]")
    expect(nested).to_have_count(1)
    expect(nested).to_have_class(re.compile(r"\bok\b"))
    expect(turn.locator(":scope > details.tool")).to_have_count(1)


def test_it_shows_a_plan_card(page, navi, live_llm):
    # Several steps in one message: the profile's planning "auto" makes a planning call for it.
    request = "make a plan: first look around the house, then report back what you found"
    live_llm.add_rule(Rule(system="planning step", match="make a plan", turns=[Turn(content="1. Walk through every room\n2. Write a short summary")]))
    live_llm.add_rule(Rule(match="make a plan", turns=[Turn(content="Plan done.")]))
    open_new_chat(page, navi)
    send(page, request)
    turn = last_turn(page)
    expect(turn.locator(".plan")).to_contain_text("Walk through every room")
    expect(turn.locator(".plan li")).to_have_count(2)
    expect(turn.locator(".bubble.assistant")).to_have_text("Plan done.")
    screenshot(page, "04-plan-card")


def test_thinking_is_open_while_streaming_then_collapses_and_reopens(page, navi, live_llm):
    live_llm.add_rule(Rule(match="think first", turns=[
        Turn(thinking="Let me think about this carefully.", content="Thought it through.", chunk_size=4, delay=0.02)
    ]))
    page.add_init_script(RECORD_PENDING)
    open_new_chat(page, navi)
    send(page, "think first")
    turn = last_turn(page)
    expect(turn.locator(".bubble.assistant")).to_have_text("Thought it through.")
    thinking = turn.locator("details.thinking")
    expect(thinking).to_have_count(1)
    assert page.evaluate("window.__seen.openThinking") == 1, "the thinking block was open while streaming"
    assert not thinking.evaluate("d => d.open"), "it collapsed at thinking_end"
    expect(thinking.locator(".thinking-body")).to_have_text("Let me think about this carefully.")
    thinking.locator("summary").click()
    assert thinking.evaluate("d => d.open"), "it can be re-opened"
    screenshot(page, "05-thinking")


def test_stop_mid_stream_keeps_the_partial_text(page, navi, live_llm):
    live_llm.add_rule(DIRECT)
    live_llm.add_rule(Rule(match="long story", turns=[Turn(content=talk(400), chunk_size=5, delay=0.04)]))
    open_new_chat(page, navi)
    send(page, "long story")
    turn = last_turn(page)
    expect(turn.locator(".bubble.assistant")).to_contain_text("word0 word1 word2")
    expect(page.locator("#stop")).to_be_visible()
    with page.expect_request(lambda r: r.url.endswith("/stop") and r.method == "POST") as stop_request:
        page.click("#stop")
    assert stop_request.value.headers.get("x-csrftoken"), "Stop sends the CSRF header"
    expect(turn.locator(".status-badge.stopped")).to_be_visible()
    expect(page.locator("#send")).to_be_visible()
    expect(page.locator("#stop")).to_be_hidden()
    text = turn.locator(".bubble.assistant").inner_text()
    assert text.startswith("word0 word1") and len(text) < len(talk(400))
    screenshot(page, "06-stopped")


COUNT = " ".join(f"n{i}" for i in range(150))


def _assert_single_answer(page, question: str) -> None:
    expect(page.locator(".group.user", has_text=question)).to_have_count(1)
    turn = last_turn(page)
    expect(turn.locator(".bubble.assistant")).to_have_text(COUNT, timeout=20_000)
    expect(turn.locator(".bubble.assistant")).to_have_count(1)
    expect(page.locator("#send")).to_be_visible()


def test_reload_mid_stream_continues_the_same_answer_without_duplicates(page, navi, live_llm):
    live_llm.add_rule(DIRECT)
    live_llm.add_rule(Rule(match="count slowly", turns=[Turn(content=COUNT, chunk_size=6, delay=0.03)]))
    open_new_chat(page, navi)
    send(page, "count slowly")
    expect(last_turn(page).locator(".bubble.assistant")).to_contain_text("n10 ")
    page.reload()
    page.wait_for_selector("body[data-ready='1']")
    _assert_single_answer(page, "count slowly")


def test_a_dropped_socket_resumes_from_the_last_seq(page, navi, live_llm):
    live_llm.add_rule(DIRECT)
    live_llm.add_rule(Rule(match="count again", turns=[Turn(content=COUNT, chunk_size=6, delay=0.03)]))
    open_new_chat(page, navi)
    send(page, "count again")
    expect(last_turn(page).locator(".bubble.assistant")).to_contain_text("n10 ")
    page.evaluate("window.navi.socket.drop()")
    _assert_single_answer(page, "count again")
    assert page.evaluate("window.navi.socket.attempt") == 0


def test_a_message_sent_while_the_history_loads_keeps_its_bubble(page, navi, live_llm):
    """The flake of issue #30: the test typed before the chat's history was drawn, and drawing it
    wiped the bubble of the message already sent. Hold the history request, send, release it."""
    live_llm.add_rule(DIRECT)
    live_llm.add_rule(Rule(match="early bird", turns=[Turn(content="catches the worm")]))
    sid = navi.create_session()
    held = []
    history = re.compile(rf"/sessions/{sid}$")
    page.route(history, lambda route: held.append(route))
    page.goto(f"{navi.url}/#{sid}")
    page.wait_for_function("id => window.navi && window.navi.socket.sessionId === id && window.navi.socket.ws.readyState === 1", arg=sid)
    for _ in range(200):  # the route handler runs while Playwright processes events
        if held:
            break
        page.wait_for_timeout(25)
    assert held, "the history request was not made"
    assert page.evaluate("document.body.dataset.ready") != "1", "ready must not be claimed before the history is drawn"
    response = held[0].fetch()  # the history as it is before the message: it arrives after the send
    send(page, "early bird")
    held[0].fulfill(response=response)
    page.unroute(history)
    expect(page.locator(".group.user", has_text="early bird")).to_have_count(1)
    expect(last_turn(page).locator(".bubble.assistant")).to_have_text("catches the worm")
    page.reload()
    page.wait_for_selector("body[data-ready='1']")
    expect(page.locator(".group.user", has_text="early bird")).to_have_count(1)


def test_typing_during_a_run_queues_the_message_until_it_ends(page, navi, live_llm):
    live_llm.add_rule(DIRECT)
    live_llm.add_rule(Rule(match="slow first", turns=[Turn(content=COUNT, chunk_size=6, delay=0.03)]))
    live_llm.add_rule(Rule(match="then this", turns=[Turn(content="second answer")]))
    open_new_chat(page, navi)
    send(page, "slow first")
    expect(last_turn(page).locator(".bubble.assistant")).to_contain_text("n3 ")
    expect(page.locator("#stop")).to_be_visible()
    page.fill("#input", "never mind this")  # the box stays editable during the run
    page.press("#input", "Enter")
    page.fill("#input", "then this")
    page.press("#input", "Enter")
    queued = page.locator("#queued li")
    expect(queued).to_have_count(2)
    expect(page.locator("#input")).to_have_value("")
    queued.first.get_by_role("button").click()  # cancel the first
    expect(queued).to_have_count(1)
    expect(queued).to_contain_text("then this")
    screenshot(page, "chat-queued")
    expect(last_turn(page).locator(".bubble.assistant")).to_have_text("second answer", timeout=20_000)
    expect(queued).to_have_count(0)
    expect(page.locator(".group.user")).to_have_count(2)
    expect(page.locator(".group.user", has_text="never mind this")).to_have_count(0)
    with navi.api() as client:
        sid = page.evaluate("location.hash.slice(1)")
        users = [m["content"] for m in client.get(f"/sessions/{sid}").json()["messages"] if m["role"] == "user"]
    assert users == ["slow first", "then this"]


def test_a_sub_agent_card_shows_its_text_while_it_streams(page, navi, live_llm):
    live_llm.add_rule(DIRECT)
    live_llm.add_rule(Rule(match="delegate this", turns=[
        Turn(tool_calls=[{"name": "spawn_agent", "arguments": {"task": "sub: count for me"}}]),
        Turn(content="The helper counted."),
    ]))
    live_llm.add_rule(Rule(match="sub: count for me", turns=[Turn(content=COUNT, chunk_size=6, delay=0.03)]))
    open_new_chat(page, navi)
    send(page, "delegate this")
    card = page.locator("details.tool[data-tool=spawn_agent]")
    card.locator("summary").click()
    live = card.locator(".subagent-text")
    expect(live).to_contain_text("n5 ")  # while the sub-agent still streams
    expect(card.locator(".tool-status")).not_to_have_text("ok")
    expect(last_turn(page).locator(".bubble.assistant")).to_have_text("The helper counted.", timeout=20_000)
    expect(last_turn(page).locator(".bubble.assistant")).to_have_count(1)  # its text never went to the answer


def test_a_second_tab_shows_a_run_started_in_the_first(page, navi, live_llm):
    live_llm.add_rule(DIRECT)
    live_llm.add_rule(Rule(match="two tabs", turns=[Turn(content=COUNT, chunk_size=6, delay=0.03)]))
    sid = open_new_chat(page, navi)
    other = page.context.new_page()
    other.goto(f"{navi.url}/#{sid}")
    other.wait_for_function("() => document.body.dataset.ready === '1' && window.navi.socket.ws.readyState === 1")
    send(page, "two tabs")
    expect(other.locator(".group.user").last).to_contain_text("two tabs")
    expect(other.locator(".bubble.assistant").last).to_contain_text(COUNT.strip()[-12:])
    assert other.locator(".group.user").count() == 1
    other.close()


EVIL = (
    'Look <img src=x onerror="window.__pwned=1"> and [click](javascript:window.__pwned=2) and '
    '![remote](http://198.51.100.7/pixel.png) and <a href="javascript:window.__pwned=3">raw</a> '
    "<script>window.__pwned=4</script> done."
)


def test_model_output_is_rendered_inert(page, navi, live_llm):
    live_llm.add_rule(Rule(match="be evil", turns=[Turn(content=EVIL, chunk_size=7)]))
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url))
    open_new_chat(page, navi)
    send(page, "be evil")
    bubble = last_turn(page).locator(".bubble.assistant")
    expect(bubble).to_contain_text("done.")
    expect(page.locator("#send")).to_be_visible()
    assert bubble.locator("img").count() == 0
    assert bubble.locator("script").count() == 0
    hrefs = bubble.locator("a").evaluate_all("as => as.map(a => a.getAttribute('href'))")
    assert all(h is None or not h.lower().startswith("javascript") for h in hrefs), hrefs
    bubble.locator("a", has_text="click").click()
    bubble.locator("a", has_text="raw").click()
    assert page.evaluate("window.__pwned") is None
    expect(bubble.locator(".blocked-image")).to_have_count(2)
    expect(bubble.locator(".blocked-image").nth(1)).to_contain_text("198.51.100.7")
    bad = [u for u in requests if "198.51.100.7" in u or u.endswith("/x") or not u.startswith(navi.url)]
    assert bad == [], bad


def test_code_blocks_are_highlighted_with_a_copy_button(page, navi, live_llm):
    live_llm.add_rule(Rule(match="show code", turns=[Turn(content="```python\ndef f():\n    return 1\n```")]))
    open_new_chat(page, navi)
    send(page, "show code")
    block = last_turn(page).locator(".codeblock")
    expect(block.locator("pre.code code.hljs .hljs-keyword").first).to_have_text("def")
    expect(block.locator(".code-head button.copy")).to_have_text("Copy")
    expect(block.locator(".code-head .lang")).to_have_text("python")


def test_pin_rename_and_delete_in_the_sidebar(page, navi):
    first = navi.create_session()
    second = navi.create_session()
    page.goto(f"{navi.url}/#{first}")
    page.wait_for_selector("body[data-ready='1']")
    item = page.locator(f"#session-list li[data-id='{first}']")
    item.locator("button.pin").click()
    expect(page.locator("#session-list li").first).to_have_attribute("data-id", first)
    expect(page.locator(f"#session-list li[data-id='{first}']")).to_have_class(re.compile(r"\bpinned\b"))
    page.locator(f"#session-list li[data-id='{first}'] button.rename").click()
    page.fill(".rename-input", "My pinned chat")
    page.press(".rename-input", "Enter")
    expect(page.locator(f"#session-list li[data-id='{first}'] .session-title")).to_have_text("My pinned chat")
    page.reload()
    page.wait_for_selector("body[data-ready='1']")
    expect(page.locator("#session-list li").first).to_have_attribute("data-id", first)
    screenshot(page, "07-sidebar")
    page.locator(f"#session-list li[data-id='{second}'] button.delete").click()
    expect(page.locator(f"#session-list li[data-id='{second}']")).to_have_count(0)
    with navi.api() as api:
        assert api.get(f"/sessions/{second}").status_code == 404
        assert api.get(f"/sessions/{first}").json()["pinned"] is True
    page.locator(f"#session-list li[data-id='{first}'] button.pin").click()
    expect(page.locator(f"#session-list li[data-id='{first}']")).not_to_have_class(re.compile(r"\bpinned\b"))


def test_the_page_opens_the_most_recent_session_without_a_hash(page, navi):
    page.goto(f"{navi.url}/")
    page.wait_for_selector("body[data-ready='1']")
    with navi.api() as api:
        sessions = api.get("/sessions").json()["sessions"]
    latest = max(sessions, key=lambda s: s["last_active"])
    assert page.evaluate("location.hash.slice(1)") == latest["id"]


def test_an_uploaded_file_reaches_the_agent(page, navi, live_llm, tmp_path):
    sid = open_new_chat(page, navi)
    with navi.api() as api:
        probe = api.post(f"/sessions/{sid}/files")
    if probe.status_code == 404 and "no session" not in probe.text:
        pytest.xfail("POST /sessions/<id>/files is not implemented yet")
    doc = tmp_path / "notes.txt"
    doc.write_text("the secret word is pineapple\n")
    page.set_input_files("#attach-file", str(doc))
    expect(page.locator("#attachments .chip.file")).to_contain_text("notes.txt")
    send(page, "summarise the attached file")
    expect(page.locator(".group.user").last.locator(".files")).to_contain_text("notes.txt")
    expect(last_turn(page).locator(".bubble.assistant")).to_contain_text("summarise the attached file")
    bodies = [str(r) for r in live_llm.requests]
    assert any("[Uploaded files on disk:" in b and "notes.txt" in b for b in bodies)


def test_the_debug_page_shows_context_frames_and_tools(page, navi, live_llm):
    sid = open_new_chat(page, navi)
    send(page, "debug me")
    expect(last_turn(page).locator(".bubble.assistant")).to_have_text("echo: debug me")
    page.goto(f"{navi.url}/debug#{sid}")
    page.wait_for_selector("body[data-ready='1']")
    expect(page.locator("#context tbody")).to_contain_text("debug me")
    expect(page.locator("#tools tbody")).to_contain_text("list_tools")
    expect(page.locator("#profiles")).to_contain_text("secretary")
    screenshot(page, "08-debug")


def test_it_works_at_phone_width(browser, login_state, navi):
    context = browser.new_context(storage_state=login_state, viewport={"width": 390, "height": 800})
    page = context.new_page()
    page.goto(f"{navi.url}/")
    page.wait_for_selector("body[data-ready='1']")
    expect(page.locator("#menu")).to_be_visible()
    expect(page.locator("#input")).to_be_visible()
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    # The message box is not squeezed between the buttons: it has (nearly) the whole width.
    box = page.locator("#input").bounding_box()
    assert box["width"] >= 340 and box["height"] <= 60
    expect(page.locator("#send")).to_be_in_viewport()
    screenshot(page, "09-phone-composer")
    page.click("#menu")
    expect(page.locator("#new-chat")).to_be_in_viewport()
    screenshot(page, "09-phone")
    context.close()


def test_the_page_sends_a_strict_csp(navi):
    with httpx.Client(base_url=navi.url) as client:
        response = client.get("/login/")
    csp = response.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "unsafe-inline" not in csp.split("script-src")[1].split(";")[0]
    assert "img-src 'self' data: blob:" in csp


PNG_1PX = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6360f8cfc0f01f0005000201e2266d4f0000000049454e44ae426082"
)


def test_an_attached_image_is_shown_and_sent_as_base64(page, navi, live_llm, tmp_path):
    image = tmp_path / "dot.png"
    image.write_bytes(PNG_1PX)
    open_new_chat(page, navi)
    page.set_input_files("#attach-image", str(image))
    expect(page.locator("#attachments .chip.image img")).to_have_count(1)
    send(page, "what is in this picture")
    expect(page.locator(".group.user").last.locator(".images img")).to_have_count(1)
    expect(last_turn(page).locator(".bubble.assistant")).to_contain_text("what is in this picture")
    sent = [m for r in live_llm.requests for m in r.get("messages", []) if m.get("images")]
    assert sent and sent[-1]["images"][0].startswith("iVBORw0KGgo")


def test_profile_switches_and_new_memories_are_shown_as_notices(page, navi, live_llm):
    live_llm.add_rule(DIRECT)
    live_llm.add_rule(Rule(match="I live in Lisbon, check my server", turns=[
        Turn(tool_calls=[{"name": "memory_save", "arguments": {"category": "home", "key": "city", "value": "Lisbon"}}]),
        Turn(tool_calls=[{"name": "switch_profile", "arguments": {"profile_id": "server_admin"}}]),
        Turn(content="Noted, and switched to admin mode."),
    ]))
    open_new_chat(page, navi)
    send(page, "I live in Lisbon, check my server")
    turn = last_turn(page)
    expect(turn.locator(".notice.memory")).to_contain_text("Remembered (home) city: Lisbon")
    expect(turn.locator(".notice.profile")).to_contain_text("Switched to profile Server Administrator")
    expect(page.locator(".bubble.assistant").last).to_contain_text("switched to admin mode")
    screenshot(page, "14-notices")


SHOWN_NUMBERS = """() => [...document.querySelectorAll('#scroller .messages .group')]
    .map((n) => Number((n.textContent.match(/message (\\d+)/) || [])[1])).filter(Boolean)"""
# Scroll to the top and say where the group showing "message <n>" is on screen, in one task:
# before the IntersectionObserver that renders older messages has run.
TOP_OF_GROUP = """(n) => {
    const group = [...document.querySelectorAll('#scroller .messages .group')]
        .find((g) => Number((g.textContent.match(/message (\\d+)/) || [])[1]) === n);
    return group.getBoundingClientRect().top;
}"""


def test_a_long_chat_opens_at_its_newest_messages_and_scrolling_up_loads_older_ones(page, navi):
    count = 1000
    messages = [{"seq": i, "role": "user" if i % 2 else "assistant", "content": f"message {i}"} for i in range(1, count + 1)]
    export = {"format": "navi.session", "version": 1, "session": {"title": "a long chat"}, "messages": messages}
    with navi.api() as client:
        sid = client.post("/sessions/import", json=export).json()["session_id"]
    history = []
    page.on("response", lambda r: history.append((r.url, r.json())) if f"/sessions/{sid}" in r.url and r.request.method == "GET" else None)
    page.goto(f"{navi.url}/#{sid}")
    page.wait_for_selector("body[data-ready='1']")
    expect(page.locator("#scroller .messages")).to_contain_text("message 1000")
    assert len(history[0][1]["messages"]) == 200 and history[0][1]["has_more"]  # one page, not the whole chat
    shown = page.evaluate(SHOWN_NUMBERS)
    assert shown[-1] == 1000 and shown[0] > 800 and shown == sorted(set(shown))
    assert page.evaluate("() => { const s = document.querySelector('#scroller'); return s.scrollHeight - s.scrollTop - s.clientHeight; }") < 5

    # Scroll to the top again and again: older messages are prepended (from the page at hand,
    # then from older pages fetched with ?before=), and what is on screen stays in place.
    for _ in range(100):
        oldest = shown[0]
        if oldest == 1:
            break
        top = page.evaluate(f"(n) => {{ document.querySelector('#scroller').scrollTop = 0; return ({TOP_OF_GROUP})(n); }}", oldest)
        page.wait_for_function(f"() => ({SHOWN_NUMBERS})()[0] < {oldest}")
        assert abs(page.evaluate(TOP_OF_GROUP, oldest) - top) < 2, f"the view jumped when messages before {oldest} came"
        shown = page.evaluate(SHOWN_NUMBERS)
    assert shown == list(range(1, count + 1))  # every message once, in order
    assert sum("before=" in url for url, _ in history) == 4 and not history[-1][1]["has_more"]
    expect(page.locator("#scroller .older")).to_have_text("Start of the conversation")


def _picture_b64() -> str:
    """A 480x360 PNG: its height is known only once it is decoded, after the chat is drawn."""
    import base64
    import io

    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", (480, 360), (90, 140, 200)).save(buffer, format="PNG")
    return base64.b64encode(buffer.getvalue()).decode()


def _rich_chat(navi, count: int = 300) -> str:
    picture = _picture_b64()
    messages = []
    for i in range(1, count + 1):
        if i % 2:
            messages.append({"seq": i, "role": "user", "content": f"question {i}", **({"images": [picture]} if i % 20 == 1 else {})})
        else:
            body = f"answer {i}\n\n" + "Some words that wrap over a few lines of the answer. " * 6
            body += "\n\n```python\n" + "\n".join(f"print({n})  # line {n}" for n in range(12)) + "\n```\n\n$$\\sum_{k=1}^{n} k = \\frac{n(n+1)}{2}$$"
            messages.append({"seq": i, "role": "assistant", "content": body})
    export = {"format": "navi.session", "version": 1, "session": {"title": "a rich chat"}, "messages": messages}
    with navi.api() as client:
        return client.post("/sessions/import", json=export).json()["session_id"]


AT_THE_END = """() => {
    const s = document.querySelector('#scroller');
    const groups = s.querySelectorAll('.messages > .group');
    const last = groups[groups.length - 1].getBoundingClientRect();
    const view = s.getBoundingClientRect();
    return { gap: Math.round(view.bottom - last.bottom), left: Math.round(s.scrollHeight - s.scrollTop - s.clientHeight),
             images: [...s.querySelectorAll('img')].every((i) => i.complete) };
}"""


def _assert_opens_at_the_end(page) -> None:
    page.wait_for_selector("body[data-ready='1']")
    expect(page.locator("#scroller .messages > .group").last).to_contain_text("answer 300")
    page.wait_for_function(f"() => ({AT_THE_END})().images")
    page.wait_for_timeout(300)  # late layout (images, math, highlighted code) has had its frames
    where = page.evaluate(AT_THE_END)
    assert where["left"] < 5 and 0 <= where["gap"] < 80, where  # the newest message's bottom is in view
    expect(page.locator("#jump")).to_be_hidden()


@pytest.mark.parametrize("width", [1200, 375])
def test_a_long_chat_opens_at_its_true_end(browser, login_state, navi, live_llm, width):
    sid = _rich_chat(navi)
    context = browser.new_context(storage_state=login_state, viewport={"width": width, "height": 760})
    page = context.new_page()
    try:
        page.goto(f"{navi.url}/#{sid}")  # by reload
        _assert_opens_at_the_end(page)
        other = navi.create_session()
        page.goto(f"{navi.url}/#{other}")
        page.wait_for_selector("body[data-ready='1']")
        if width < 720:
            page.click("#menu")
        page.click(f"#session-list li[data-id='{sid}'] .session-title")  # from the sidebar
        _assert_opens_at_the_end(page)
        screenshot(page, f"chat-long-end-{width}")
    finally:
        context.close()
