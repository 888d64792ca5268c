"""Versions of a turn in a real browser (issue #30 item 3): an edit and a regenerate keep the
earlier version, "‹ n/m ›" switches between them (mouse and keyboard), the choice survives a
reload and an export/import, and the controls pass axe in both themes and fit a phone."""

from __future__ import annotations

import json
import shutil

import pytest
from playwright.sync_api import expect

from tests.browser.test_daily import DIRECT, api_session, axe_serious, new_page, open_chat, send, wait_idle_with_ids
from tests.browser_support import CHROMIUM, screenshot
from tests.llm_server import Rule, Turn

pytestmark = pytest.mark.skipif(not shutil.which(CHROMIUM), reason="needs Debian's chromium (apt-get install chromium)")


@pytest.fixture
def page(browser, login_state, live_llm):
    live_llm.reset()
    context, page = new_page(browser, login_state, accept_downloads=True)
    yield page
    context.close()


def shown(page) -> tuple[list[str], list[str]]:
    return page.locator(".group.user .text").all_inner_texts(), page.locator(".bubble.assistant").all_inner_texts()


def test_edit_and_regenerate_versions_switch_reload_and_export_import(page, navi, live_llm, tmp_path):
    live_llm.add_rule(DIRECT)
    sid = open_chat(page, navi)
    send(page, "alpha")
    expect(page.locator(".bubble.assistant").last).to_have_text("echo: alpha")
    wait_idle_with_ids(page)
    expect(page.locator(".versions")).to_have_count(0)  # nothing to switch yet

    # An edit: the new version shows as 2/2 under the message.
    page.locator(".group.user button.edit").click()
    page.fill(".edit-input", "beta")
    page.click(".edit-form button.save")
    expect(page.locator(".bubble.assistant")).to_have_text("echo: beta")
    user_versions = page.locator(".group.user .versions")
    expect(user_versions.locator(".version-label")).to_have_text("2/2")

    # A regenerate: the new answer shows as 2/2 under the answer.
    live_llm.reset()
    live_llm.add_rule(DIRECT)
    live_llm.add_rule(Rule(match="beta", turns=[Turn(content="Beta, second answer.")]))
    page.locator(".group.turn button.regen").click()
    expect(page.locator(".bubble.assistant")).to_have_text("Beta, second answer.")
    answer_versions = page.locator(".group.turn .versions")
    expect(answer_versions.locator(".version-label")).to_have_text("2/2")
    expect(user_versions.locator(".version-label")).to_have_text("2/2")
    screenshot(page, "versions-01-both")

    # Back to the first answer with the mouse; the focus stays on the control (now on Next).
    answer_versions.get_by_role("button", name="Previous version").click()
    expect(page.locator(".bubble.assistant")).to_have_text("echo: beta")
    expect(answer_versions.locator(".version-label")).to_have_text("1/2")
    expect(answer_versions.get_by_role("button", name="Previous version")).to_be_disabled()
    expect(answer_versions.get_by_role("button", name="Next version")).to_be_focused()
    # And forward again with the keyboard.
    page.keyboard.press("Enter")
    expect(page.locator(".bubble.assistant")).to_have_text("Beta, second answer.")
    expect(answer_versions.get_by_role("button", name="Previous version")).to_be_focused()

    # The first version of the message: its own answer, no answer versions.
    user_versions.get_by_role("button", name="Previous version").click()
    expect(page.locator(".group.user .text")).to_have_text("alpha")
    expect(page.locator(".bubble.assistant")).to_have_text("echo: alpha")
    expect(user_versions.locator(".version-label")).to_have_text("1/2")
    expect(page.locator(".group.turn .versions")).to_have_count(0)
    assert [m["content"] for m in api_session(navi, sid)["messages"]] == ["alpha", "echo: alpha"]

    page.reload()
    page.wait_for_selector("body[data-ready='1']")
    assert shown(page) == (["alpha"], ["echo: alpha"])
    expect(page.locator(".group.user .version-label")).to_have_text("1/2")

    # The conversation goes on from the version shown.
    send(page, "gamma")
    expect(page.locator(".bubble.assistant").last).to_have_text("echo: gamma")
    wait_idle_with_ids(page)
    from agent.context.prompts import without_clock

    # The user's words as the model read them: the clock and the default step's note under them left out.
    asked = [without_clock(m["content"].split("\n\n---\n[next step]")[0])
             for m in live_llm.requests[-1]["messages"] if m["role"] == "user"]
    assert asked[-2:] == ["alpha", "gamma"] and "beta" not in asked

    # Export → import: the copy keeps every version and switches like the original.
    page.click("details.export summary")
    with page.expect_download() as download:
        page.click("#export-json")
    path = tmp_path / "chat.json"
    path.write_text(open(download.value.path(), encoding="utf-8").read(), encoding="utf-8")
    assert len(json.loads(path.read_text(encoding="utf-8"))["messages"]) >= 8
    page.set_input_files("#import-file", str(path))
    page.wait_for_function("id => location.hash && location.hash.slice(1) !== id", arg=sid)
    page.wait_for_selector("body[data-ready='1']")
    assert shown(page) == (["alpha", "gamma"], ["echo: alpha", "echo: gamma"])
    page.locator(".group.user").first.get_by_role("button", name="Next version").click()
    expect(page.locator(".group.user .text")).to_have_text(["beta"])  # its branch: no "gamma"
    expect(page.locator(".bubble.assistant")).to_have_text(["Beta, second answer."])  # the answer chosen last
    expect(page.locator(".group.turn .version-label")).to_have_text("2/2")


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_version_controls_pass_axe_and_fit_a_phone(browser, navi, live_llm, login_state, scheme):
    live_llm.reset()
    live_llm.add_rule(DIRECT)
    sid = navi.create_session()
    with navi.api() as client:
        client.post(f"/sessions/{sid}/messages", json={"content": "first"}).raise_for_status()
        client.post(f"/sessions/{sid}/regenerate").raise_for_status()
        message_id = client.get(f"/sessions/{sid}").json()["messages"][0]["id"]
        client.post(f"/sessions/{sid}/messages/{message_id}/edit", json={"content": "second"}).raise_for_status()
    context, page = new_page(browser, login_state, color_scheme=scheme, viewport={"width": 390, "height": 800})
    try:
        open_chat(page, navi, sid)
        expect(page.locator(".group.user .version-label")).to_have_text("2/2")
        page.locator(".group.user").get_by_role("button", name="Previous version").click()
        expect(page.locator(".group.turn .version-label")).to_have_text("2/2")
        for control in page.locator(".versions").all():
            box = control.bounding_box()
            assert box and box["x"] >= 0 and box["x"] + box["width"] <= 390, box
        previous = page.locator(".group.turn").get_by_role("button", name="Previous version")
        previous.focus()
        page.keyboard.press("Tab")  # reached by the keyboard: Tab away and back
        page.keyboard.press("Shift+Tab")
        expect(previous).to_be_focused()
        assert page.evaluate("getComputedStyle(document.activeElement).outlineStyle") != "none"  # the focus shows
        screenshot(page, f"versions-02-phone-{scheme}")
        assert axe_serious(page) == []
    finally:
        context.close()
