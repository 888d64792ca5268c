"""Approving risky tool calls in the chat page, in a real browser (Debian's Chromium via
Playwright) against a live Navi server and the protocol-level test LLM. On a fresh live server
the owner is a superuser and `terminal` is `ask`, so a scripted terminal call waits for us."""

from __future__ import annotations

import json
import re
import shutil

import pytest
from playwright.sync_api import expect

from tests.browser_support import CHROMIUM, log_in, screenshot
from tests.live_server import LiveNavi
from tests.llm_server import Rule, Turn

pytestmark = pytest.mark.skipif(not shutil.which(CHROMIUM), reason="needs Debian's chromium (apt-get install chromium)")

DIRECT = Rule(system="planning step", match="", turns=[Turn(content="DIRECT")])  # no plan step
CARD = ".approval:not(.done)"


def new_page(browser, login_state, **options):
    options.setdefault("viewport", {"width": 1200, "height": 800})
    context = browser.new_context(storage_state=login_state, **options)
    return context.new_page()


@pytest.fixture
def page(browser, login_state, live_llm):
    live_llm.reset()
    live_llm.add_rule(DIRECT)
    page = new_page(browser, login_state)
    yield page
    page.context.close()


def record_sent_frames(page) -> list[dict]:
    """Every JSON frame the page sends on any of its WebSockets (reloads included)."""
    sent: list[dict] = []

    def on_socket(ws):
        ws.on("framesent", lambda payload: sent.append(json.loads(payload)))

    page.on("websocket", on_socket)
    return sent


def open_new_chat(page, navi) -> str:
    page.goto(f"{navi.url}/")
    page.wait_for_selector("body[data-ready='1']")
    if page.locator("#menu").is_visible():  # phone width: the sidebar slides in
        page.click("#menu")
    # New chat reuses your newest chat while it is empty (maybe the one shown): follow the answer.
    with page.expect_response(lambda r: r.url.endswith("/sessions") and r.request.method == "POST") as created:
        page.click("#new-chat")
    sid = created.value.json()["session_id"]
    page.wait_for_function("id => location.hash.slice(1) === id", arg=sid)
    wait_ready(page)
    return page.evaluate("location.hash.slice(1)")


def wait_ready(page) -> None:
    page.wait_for_function(
        "() => document.body.dataset.ready === '1' && window.navi && window.navi.socket.sessionId === location.hash.slice(1)"
        " && window.navi.socket.ws.readyState === 1"
    )


def send(page, text: str) -> None:
    page.fill("#input", text)
    page.press("#input", "Enter")


def terminal_rule(match: str, command: str = "ls", answer: str = "Here are your files.") -> Rule:
    return Rule(
        match=match,
        turns=[
            Turn(tool_calls=[{"name": "terminal", "arguments": {"command": command}}]),
            Turn(content=answer),
        ],
    )


def tool_results(live_llm) -> list[str]:
    """The tool messages of the last request the model got."""
    return [m.get("content", "") for m in live_llm.requests[-1]["messages"] if m.get("role") == "tool"]


def approval_frames(sent: list[dict]) -> list[dict]:
    return [f for f in sent if f.get("type") == "approval"]


def test_approve_runs_the_tool_and_the_answer_follows(page, navi, live_llm):
    live_llm.add_rule(terminal_rule("list the server files"))
    sent = record_sent_frames(page)
    open_new_chat(page, navi)
    send(page, "list the server files")
    card = page.locator(CARD)
    expect(card).to_be_visible()
    expect(card).to_have_attribute("role", "alertdialog")
    expect(card.locator(".approval-title")).to_contain_text("terminal")
    expect(card.locator(".approval-reason")).to_contain_text(re.compile(r"\w"))
    assert json.loads(card.locator(".approval-args").inner_text()) == {"command": "ls"}
    assert '\n  "command": "ls"\n' in card.locator(".approval-args").inner_text(), "2-space pretty JSON"
    tool = page.locator("details.tool[data-tool=terminal]")
    expect(tool.locator(".tool-status")).to_have_text("awaiting approval")
    # The run is still on: Stop is offered, the composer waits.
    expect(page.locator("#stop")).to_be_visible()
    expect(page.locator("#input")).to_be_editable()  # typing during a run is allowed (it queues)
    # Focus went to Approve (the composer was not being typed in): the keyboard answers.
    expect(card.locator("button.approve")).to_be_focused()
    page.keyboard.press("Tab")
    expect(card.locator("button.deny")).to_be_focused()
    page.keyboard.press("Shift+Tab")
    screenshot(page, "30-approval-pending")
    page.keyboard.press("Enter")
    done = page.locator(".approval.done")
    expect(done.locator(".approval-outcome")).to_have_text("Approved")
    expect(done).to_have_attribute("data-decision", "approve")
    expect(tool).to_have_class(re.compile(r"\bok\b"))
    expect(page.locator(".bubble.assistant").last).to_have_text("Here are your files.")
    expect(page.locator("#send")).to_be_visible()
    frames = approval_frames(sent)
    assert len(frames) == 1 and frames[0]["decision"] == "approve" and "remember" not in frames[0]
    assert frames[0]["approval_id"] == done.get_attribute("data-approval-id")
    assert not any("declined" in r.lower() for r in tool_results(live_llm))
    screenshot(page, "31-approval-approved")
    # After a reload the history shows the same outcome, with who answered and when.
    page.reload()
    page.wait_for_selector("body[data-ready='1']")
    past = page.locator(".approval.done")
    expect(past).to_have_count(1)
    expect(past.locator(".approval-outcome")).to_have_text("Approved")
    expect(past.locator(".approval-when")).to_contain_text(f"by {navi.username}")


def test_deny_tells_the_model_and_the_card_says_denied(page, navi, live_llm):
    live_llm.add_rule(
        terminal_rule("delete the logs", command="rm -rf old-logs/", answer="Understood, I left them alone.")
    )
    open_new_chat(page, navi)
    send(page, "delete the logs")
    card = page.locator(CARD)
    expect(card.locator(".approval-args")).to_contain_text('"command": "rm -rf old-logs/"')
    card.locator("button.deny").click()
    expect(page.locator(".approval.done .approval-outcome")).to_have_text("Denied")
    tool = page.locator("details.tool[data-tool=terminal]")
    expect(tool).to_have_class(re.compile(r"\bfailed\b"))
    expect(page.locator(".bubble.assistant").last).to_have_text("Understood, I left them alone.")
    results = tool_results(live_llm)
    assert results and re.search(r"declin|denied", results[-1], re.I), results
    screenshot(page, "32-approval-denied")
    page.reload()
    page.wait_for_selector("body[data-ready='1']")
    expect(page.locator(".approval.done .approval-outcome")).to_have_text("Denied")
    expect(page.locator(".approval.done")).to_have_attribute("data-decision", "deny")


def test_the_buttons_wait_for_the_server_after_a_click(page, navi, live_llm):
    live_llm.add_rule(terminal_rule("show uptime", command="uptime", answer="Up a while."))
    page.add_init_script("""
      window.__busy = [];
      new MutationObserver(() => {
        const b = document.querySelector('.approval:not(.done) button.approve');
        if (b && b.disabled) window.__busy.push(b.textContent);
      }).observe(document, {subtree: true, childList: true, attributes: true, characterData: true});
    """)
    open_new_chat(page, navi)
    send(page, "show uptime")
    page.locator(CARD).locator("button.approve").click()
    expect(page.locator(".bubble.assistant").last).to_have_text("Up a while.")
    assert "Approving…" in page.evaluate("window.__busy")


def test_always_in_this_chat_approves_later_calls_without_asking(page, navi, live_llm):
    live_llm.add_rule(terminal_rule("first look", answer="First done."))
    live_llm.add_rule(terminal_rule("second look", command="pwd", answer="Second done."))
    sent = record_sent_frames(page)
    open_new_chat(page, navi)
    send(page, "first look")
    page.locator(CARD).locator("button.remember").click()
    expect(page.locator(".approval.done .approval-outcome")).to_have_text("Always allowed in this chat")
    expect(page.locator(".bubble.assistant").last).to_have_text("First done.")
    assert approval_frames(sent)[-1]["remember"] == "session"
    send(page, "second look")
    expect(page.locator(".bubble.assistant").last).to_have_text("Second done.")
    expect(page.locator(".approval")).to_have_count(1)
    expect(page.locator("details.tool[data-tool=terminal]").last).to_have_class(re.compile(r"\bok\b"))


def test_a_pending_approval_survives_a_reload_and_can_be_answered(page, navi, live_llm):
    live_llm.add_rule(terminal_rule("check disk", command="df -h", answer="Disk is fine."))
    open_new_chat(page, navi)
    send(page, "check disk")
    expect(page.locator(CARD)).to_be_visible()
    page.reload()
    wait_ready(page)
    card = page.locator(CARD)
    expect(card).to_have_count(1)
    expect(card.locator(".approval-args")).to_contain_text("df -h")
    expect(page.locator("#stop")).to_be_visible()
    expect(page.locator(".group.user", has_text="check disk")).to_have_count(1)
    card.locator("button.approve").click()
    expect(page.locator(".approval.done .approval-outcome")).to_have_text("Approved")
    expect(page.locator(".bubble.assistant").last).to_have_text("Disk is fine.")
    expect(page.locator("details.tool[data-tool=terminal]")).to_have_count(1)


def test_a_second_tab_sees_the_card_and_closes_it_when_the_first_answers(page, navi, live_llm):
    live_llm.add_rule(terminal_rule("two tabs approve", command="whoami", answer="You are you."))
    sid = open_new_chat(page, navi)
    early = page.context.new_page()  # open before the run: gets the live frames
    early.goto(f"{navi.url}/#{sid}")
    wait_ready(early)
    # The early tab is typing (renaming the chat): the card must not take its focus.
    early.locator(f"#session-list li[data-id='{sid}'] button.rename").click()
    early.keyboard.type("Renamed")
    send(page, "two tabs approve")
    expect(page.locator(CARD)).to_be_visible()
    expect(early.locator(CARD)).to_be_visible()
    expect(early.locator(".rename-input")).to_be_focused()
    expect(page.locator(CARD).locator("button.approve")).to_be_focused()
    early.keyboard.press("Escape")
    late = page.context.new_page()  # open while the approval waits: gets the replay
    late.goto(f"{navi.url}/#{sid}")
    wait_ready(late)
    expect(late.locator(CARD)).to_be_visible()
    page.locator(CARD).locator("button.approve").click()
    for tab in (page, early, late):
        expect(tab.locator(".approval.done .approval-outcome")).to_have_text("Approved")
        expect(tab.locator(CARD)).to_have_count(0)
        expect(tab.locator(".bubble.assistant").last).to_have_text("You are you.")
    early.close()
    late.close()


def test_a_sub_agent_call_asks_inside_its_open_spawn_card(page, navi, live_llm):
    live_llm.add_rule(
        Rule(
            match="delegate the check",
            turns=[
                Turn(tool_calls=[{"name": "spawn_agent", "arguments": {"task": "subtask: check the host"}}]),
                Turn(content="Delegated."),
            ],
        )
    )
    live_llm.add_rule(terminal_rule("subtask: check the host", command="echo checking the host", answer="sub done"))
    open_new_chat(page, navi)
    send(page, "delegate the check")
    spawn = page.locator("details.tool[data-tool=spawn_agent]")
    card = spawn.locator(f".subagent {CARD}")
    expect(card).to_be_visible()
    expect(card.locator(".approval-title")).to_contain_text("A sub-agent wants to run terminal")
    card.locator("button.approve").click()
    expect(spawn.locator(".approval.done .approval-outcome")).to_have_text("Approved")
    expect(page.locator(".bubble.assistant").last).to_have_text("Delegated.")
    expect(spawn.locator(".subagent details.tool[data-tool=terminal]")).to_have_class(re.compile(r"\bok\b"))


def test_stop_cancels_a_pending_approval(page, navi, live_llm):
    live_llm.add_rule(terminal_rule("reboot it", command="echo rebooting", answer="never said"))
    open_new_chat(page, navi)
    send(page, "reboot it")
    expect(page.locator(CARD)).to_be_visible()
    page.click("#stop")
    expect(page.locator(".approval.done .approval-outcome")).to_have_text("Cancelled (stopped)")
    expect(page.locator(".status-badge.stopped")).to_be_visible()
    expect(page.locator("#send")).to_be_visible()


def test_an_answer_the_server_refuses_is_a_toast_and_the_run_goes_on(page, navi, live_llm):
    live_llm.add_rule(terminal_rule("check memory", command="free -m", answer="Memory is fine."))
    open_new_chat(page, navi)
    send(page, "check memory")
    card = page.locator(CARD)
    expect(card).to_be_visible()
    page.evaluate("window.navi.socket.send({type: 'approval', approval_id: 'no-such-approval', decision: 'approve'})")
    expect(page.locator("#toast .toast")).to_be_visible()
    expect(page.locator(".error-box")).to_have_count(0)
    expect(page.locator("#stop")).to_be_visible()
    card.locator("button.approve").click()
    expect(page.locator(".bubble.assistant").last).to_have_text("Memory is fine.")


NOTIFICATIONS = """
window.__notes = [];
Object.defineProperty(document, 'hidden', {get: () => true});
window.Notification = class {
  static permission = 'granted';
  constructor(title, options) { this.closed = false; window.__notes.push({title, ...options, note: this}); }
  close() { this.closed = true; }
};
"""


def test_a_hidden_tab_gets_a_desktop_notification_when_permission_was_granted(page, navi, live_llm):
    live_llm.add_rule(terminal_rule("notify me", command="date", answer="It is now."))
    page.add_init_script(NOTIFICATIONS)
    open_new_chat(page, navi)
    send(page, "notify me")
    expect(page.locator(CARD)).to_be_visible()
    page.wait_for_function("window.__notes.length === 1")
    assert page.evaluate("window.__notes[0].title") == "Navi needs your approval"
    assert "terminal" in page.evaluate("window.__notes[0].body")
    page.locator(CARD).locator("button.approve").click()
    expect(page.locator(".bubble.assistant").last).to_have_text("It is now.")
    assert page.evaluate("window.__notes[0].note.closed"), "the notification closes with the card"


def test_the_card_fits_a_phone(browser, login_state, navi, live_llm):
    live_llm.reset()
    live_llm.add_rule(DIRECT)
    long_command = "echo checking " + "/srv/data/a/rather/long/path/to/some/log/files " * 12
    live_llm.add_rule(terminal_rule("phone approval", command=long_command, answer="Found them."))
    page = new_page(browser, login_state, viewport={"width": 375, "height": 740}, is_mobile=True, has_touch=True)
    open_new_chat(page, navi)
    send(page, "phone approval")
    card = page.locator(CARD)
    expect(card).to_be_visible()
    assert page.evaluate("document.documentElement.scrollWidth") <= 375
    args = card.locator(".approval-args")
    assert args.evaluate("e => e.scrollHeight > e.clientHeight"), "long arguments scroll inside their box"
    for name in ("approve", "deny", "remember"):
        button = card.locator(f"button.{name}")
        expect(button).to_be_in_viewport()
        box = button.bounding_box()
        assert box["x"] >= 0 and box["x"] + box["width"] <= 375 and box["height"] >= 40
    screenshot(page, "33-approval-phone")
    card.locator("button.approve").tap()
    expect(page.locator(".bubble.assistant").last).to_have_text("Found them.")
    screenshot(page, "34-approval-phone-done")
    page.context.close()


TEXT_CONTRAST = """
node => {
  const rgb = (c) => (c.match(/[\\d.]+/g) || []).map(Number);
  let back = [255, 255, 255];
  for (let n = node; n; n = n.parentElement) {
    const c = rgb(getComputedStyle(n).backgroundColor);
    if (c.length === 3 || c[3] > 0) { back = c; break; }
  }
  const lum = (c) => c.slice(0, 3).map((v) => {
    v /= 255;
    return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4;
  }).reduce((acc, v, i) => acc + v * [0.2126, 0.7152, 0.0722][i], 0);
  const [hi, lo] = [lum(rgb(getComputedStyle(node).color)), lum(back)].sort((x, y) => y - x);
  return (hi + 0.05) / (lo + 0.05);
}
"""
CARD_TEXTS = (
    ".approval-title",
    ".approval-title .tool-name",
    ".approval-reason",
    ".label",
    ".approval-args",
    "button.approve",
    "button.deny",
    "button.remember",
)


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_the_card_is_readable_in_both_themes(browser, login_state, navi, live_llm, scheme):
    live_llm.reset()
    live_llm.add_rule(DIRECT)
    live_llm.add_rule(terminal_rule(f"theme {scheme}", command="cat /etc/os-release", answer="Debian."))
    page = new_page(browser, login_state, color_scheme=scheme)
    open_new_chat(page, navi)
    send(page, f"theme {scheme}")
    card = page.locator(CARD)
    expect(card).to_be_visible()
    ratios = {sel: card.locator(sel).evaluate(TEXT_CONTRAST) for sel in CARD_TEXTS}
    assert all(r >= 4.5 for r in ratios.values()), ratios
    screenshot(page, f"35-approval-{scheme}")
    card.locator("button.approve").click()
    done = page.locator(".approval.done")
    expect(done).to_be_visible()
    outcome = done.locator(".approval-outcome").evaluate(TEXT_CONTRAST)
    assert outcome >= 4.5, outcome
    screenshot(page, f"36-approval-{scheme}-done")
    page.context.close()


def test_an_unanswered_approval_times_out(browser, login_state, live_llm):
    """Its own server: APPROVAL_TIMEOUT_S is short here, and the owner must log in again."""
    live_llm.reset()
    live_llm.add_rule(DIRECT)
    live_llm.add_rule(terminal_rule("nobody answers", command="ls /tmp", answer="No answer, so I did not run it."))
    with LiveNavi(env={"OLLAMA_HOST": live_llm.url, "APPROVAL_TIMEOUT_S": "3"}) as quick:
        context = browser.new_context(viewport={"width": 1200, "height": 800})
        page = context.new_page()
        log_in(page, quick)
        open_new_chat(page, quick)
        send(page, "nobody answers")
        expect(page.locator(CARD)).to_be_visible()
        expect(page.locator(".approval.done .approval-outcome")).to_have_text("No answer — timed out")
        expect(page.locator(".bubble.assistant").last).to_have_text("No answer, so I did not run it.")
        expect(page.locator("details.tool[data-tool=terminal]")).to_have_class(re.compile(r"\bfailed\b"))
        context.close()


def test_a_file_written_over_is_restored_from_its_card_in_one_click(page, navi, live_llm):
    """Issue 40, do no harm: the overwrite is approved, then its card's Restore button writes
    the old content back, and the model's next read sees it."""
    write = {"name": "filesystem", "arguments": {"action": "write", "path": "plan.txt", "content": "the plan"}}
    over = {"name": "filesystem", "arguments": {"action": "write", "path": "plan.txt", "content": "garbage"}}
    live_llm.add_rule(Rule(match="write the plan", turns=[Turn(tool_calls=[write]), Turn(content="Written.")]))
    live_llm.add_rule(Rule(match="scribble over it", turns=[Turn(tool_calls=[over]), Turn(content="Done.")]))
    live_llm.add_rule(Rule(match="read it back", turns=[
        Turn(tool_calls=[{"name": "filesystem", "arguments": {"action": "read", "path": "plan.txt"}}]),
        Turn(content="Read.")]))
    open_new_chat(page, navi)
    for text in ("write the plan", "scribble over it"):
        send(page, text)
        page.locator(CARD).locator("button.approve").click()
        expect(page.locator(".bubble.assistant").last).not_to_have_text("")
        expect(page.locator("#send")).to_be_visible()
    cards = page.locator("details.tool[data-tool=filesystem]")
    expect(cards).to_have_count(2)
    assert cards.nth(0).locator("button.restore").count() == 0  # a new file replaced nothing
    last = cards.nth(1)
    last.locator("summary").click()
    button = last.locator("button.restore")
    expect(button).to_have_text("Restore previous version")
    button.focus()
    screenshot(page, "36-file-restore-offered")
    page.keyboard.press("Enter")
    expect(last.locator(".restore-status")).to_contain_text("Restored plan.txt")
    expect(button).to_be_disabled()
    screenshot(page, "37-file-restored")
    send(page, "read it back")
    expect(page.locator(".bubble.assistant").last).to_have_text("Read.")
    assert "the plan" in tool_results(live_llm)[-1]
