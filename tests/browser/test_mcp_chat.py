"""MCP in the chat page (issue 39 item 6) in real Chromium: a resource of the owner's server is
attached from the composer's Resource menu and shows as a chip on the bubble; "/" offers the
servers' prompts (not another user's), keyboard-driven, arguments in a small form; a server that
is down gives the message back. Both themes, phone width, no serious axe-core findings."""

from __future__ import annotations

import httpx
import pytest
from playwright.sync_api import expect

from tests import mcp_support
from tests.browser.test_daily import axe_serious, new_page, open_chat
from tests.browser_support import screenshot
from tests.llm_server import Rule, Turn

# Elements of the composer that stick out of a phone-wide page.
WIDE = """() => [...document.querySelectorAll('#composer, #composer *, .group.user, .group.user *')]
  .filter(e => e.getBoundingClientRect().right > document.documentElement.clientWidth + 1)
  .map(e => e.tagName + '#' + e.id + '.' + e.className).slice(0, 12)"""


navi = mcp_support.mcp_navi  # this module's Navi: login_state and the tests ask for `navi`


def connected(client: httpx.Client, name: str, url: str) -> dict:
    """A server added through REST, once this Navi is connected to it."""
    created = client.post("/mcp/servers", json={"name": name, "transport": "http", "url": url})
    assert created.status_code == 201, created.text
    server = mcp_support.poll_server(client, created.json()["id"],
                                     lambda body: body["state"] == "connected" and body["prompts"], 20)
    assert server["state"] == "connected" and server["prompts"], f"{name} did not connect: {server}"
    return server


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_attach_a_resource_and_use_a_prompt_from_the_keyboard(browser, login_state, navi, live_llm, test_server,
                                                               scheme):
    api = navi.api()
    mine = connected(api, f"notes{scheme}", test_server.url)
    mallory = httpx.Client(base_url=navi.url, headers={"Authorization": f"Bearer {navi.add_user('mallory')}"},
                           timeout=30)
    theirs = connected(mallory, f"theirs{scheme}", test_server.url)
    live_llm.add_rule(Rule(match="what is on today", turns=[Turn(content="Milk, then a call with Ada.")]))
    context, page = new_page(browser, login_state, color_scheme=scheme, viewport={"width": 390, "height": 800})
    try:
        open_chat(page, navi)
        page.wait_for_selector("body[data-mcp-chat-ready='1']")
        # The Resource menu, from the keyboard: open, move down, Esc closes, open again, pick.
        button = page.get_by_role("button", name="Resource")
        button.focus()
        page.keyboard.press("Enter")
        menu = page.get_by_role("menu", name="MCP resources to attach")
        expect(menu).to_be_visible()
        expect(menu.get_by_role("menuitem")).to_have_count(3)  # today, meeting, long; not mallory's
        expect(menu).not_to_contain_text(f"theirs{scheme}")
        page.keyboard.press("Escape")
        expect(menu).to_be_hidden()
        expect(button).to_be_focused()
        page.keyboard.press("Enter")
        expect(menu.get_by_role("menuitem").first).to_be_focused()
        page.keyboard.press("Enter")  # "today", the first
        chip = page.locator("#attachments .chip.resource")
        expect(chip).to_contain_text(f"notes{scheme} · today")
        page.fill("#input", "what is on today?")
        page.press("#input", "Enter")
        bubble = page.locator(".group.user").last
        expect(bubble.locator(".chip.resource")).to_contain_text(f"notes{scheme} · notes://today")
        expect(page.locator(".bubble.assistant").last).to_contain_text("Milk, then a call with Ada.")
        sent = [m["content"] for r in live_llm.requests for m in r["messages"] if m["role"] == "user"]
        assert any("Buy milk. Call Ada." in s and "UNTRUSTED DATA" in s for s in sent)
        expect(chip).to_have_count(0)
        # After the reload of the chat's rows, the bubble still shows the chip, not the block.
        expect(bubble).not_to_contain_text("UNTRUSTED DATA")

        # "/" offers the prompts; arrows move, Esc closes, Enter picks; the form takes the argument.
        page.focus("#input")
        page.keyboard.type("/")
        listbox = page.get_by_role("listbox", name="MCP prompts")
        expect(listbox).to_be_visible()
        expect(listbox.get_by_role("option")).to_have_count(2)  # review, standup of the owner's server
        expect(listbox).not_to_contain_text(f"theirs{scheme}")
        page.keyboard.press("ArrowDown")
        expect(listbox.get_by_role("option", selected=True)).to_contain_text("/standup")
        screenshot(page, f"mcp-chat-slash-{scheme}")
        assert not page.evaluate(WIDE), page.evaluate(WIDE)
        assert not axe_serious(page)
        page.keyboard.press("Escape")
        expect(listbox).to_be_hidden()
        expect(page.locator("#send")).to_be_visible()  # Esc closed the list, it stopped nothing
        page.keyboard.type("rev")
        expect(listbox.get_by_role("option")).to_have_count(1)
        page.keyboard.press("Enter")
        topic = page.get_by_label("topic (required)")
        expect(topic).to_be_focused()
        topic.fill("the budget")
        screenshot(page, f"mcp-chat-prompt-form-{scheme}")
        assert not axe_serious(page)
        page.keyboard.press("Enter")
        expect(page.locator("#input")).to_have_value("Please review the budget carefully.")
        expect(page.locator("#input")).to_be_focused()

        # The server goes away: the message and its resource come back to the box, with why.
        page.fill("#input", "")
        button.click()
        menu.get_by_role("menuitem").nth(1).click()  # "meeting"
        test_server.stop()
        page.fill("#input", "sum up the meeting")
        page.press("#input", "Enter")
        expect(page.locator(".toast").last).to_contain_text(f"MCP server 'notes{scheme}'")
        expect(page.locator("#input")).to_have_value("sum up the meeting")
        expect(chip).to_contain_text(f"notes{scheme} · meeting")
        expect(page.locator(".group.user")).to_have_count(1)  # the refused bubble is gone
        screenshot(page, f"mcp-chat-refused-{scheme}")
    finally:
        context.close()
        api.delete(f"/mcp/servers/{mine['id']}")
        mallory.delete(f"/mcp/servers/{theirs['id']}")
        api.close()
        mallory.close()


def test_a_long_call_shows_its_progress_on_its_card(browser, login_state, navi, live_llm, test_server):
    """The server's progress notifications (Navi asks for them) move a bar on the running card,
    with the server's words; the bar goes when the call is done."""
    api = navi.api()
    server = connected(api, "counter", test_server.url)
    assert api.patch(f"/mcp/servers/{server['id']}", json={"auto_approve": True}).status_code == 200
    live_llm.add_rule(Rule(match="count to four", turns=[
        Turn(tool_calls=[{"name": "counter__steps", "arguments": {"count": 4}}]), Turn(content="Counted to four.")]))
    context, page = new_page(browser, login_state)
    try:
        open_chat(page, navi)
        page.fill("#input", "count to four")
        page.press("#input", "Enter")
        card = page.locator("details.tool").last
        bar = card.locator("progress.tool-progress")
        expect(bar).to_be_visible(timeout=20_000)
        expect(card.locator(".tool-status")).to_contain_text(" % — step ")
        assert 0 < float(bar.get_attribute("value") or 0) <= 4 and bar.get_attribute("max") == "4"
        screenshot(page, "mcp-chat-progress")
        assert not axe_serious(page)
        expect(card.locator(".tool-status")).to_have_text("done", timeout=20_000)
        expect(bar).to_have_count(0)
        expect(page.locator(".bubble.assistant").last).to_contain_text("Counted to four.")
    finally:
        context.close()
        api.delete(f"/mcp/servers/{server['id']}")
        api.close()
