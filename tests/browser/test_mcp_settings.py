"""The settings page's MCP servers section in real Chromium: a server that works shows its
tools, a broken one shows why (state and last error), from the keyboard, in both themes,
at phone width, with no serious axe-core findings."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from tests import mcp_support
from tests.browser.test_daily import axe_serious, new_page
from tests.browser_support import looks, screenshot
from tests.live_server import free_port

# Elements of the MCP section that stick out of a phone-wide page.
WIDE = """() => [...document.querySelectorAll('#mcp, #mcp *')]
  .filter(e => e.getBoundingClientRect().right > document.documentElement.clientWidth + 1)
  .map(e => e.tagName + '#' + e.id + '.' + e.className).slice(0, 12)"""


navi = mcp_support.mcp_navi  # this module's Navi: login_state and the tests ask for `navi`


def add(page, name: str, url: str) -> None:
    """Fill the form and submit it with the keyboard."""
    page.fill("#mcp-name", name)
    page.fill("#mcp-url", url)
    page.focus("#mcp-token")
    page.keyboard.press("Enter")


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_a_working_and_a_broken_server_show_their_state(browser, login_state, navi, test_server, scheme):
    context, page = new_page(browser, login_state, color_scheme=scheme, viewport={"width": 390, "height": 800})
    try:
        page.goto(f"{navi.url}/settings/")
        page.wait_for_selector("body[data-mcp-ready='1']")
        add(page, f"demo{scheme}", test_server.url)
        working = page.locator(".mcp-server", has_text=f"demo{scheme}")
        expect(working.locator(".mcp-state")).to_have_text("connected")
        working.locator("summary").first.click()
        expect(working).to_contain_text(f"demo{scheme}__add")
        add(page, f"broken{scheme}", f"http://127.0.0.1:{free_port()}/mcp")
        broken = page.locator(".mcp-server", has_text=f"broken{scheme}")
        expect(broken.locator(".mcp-state")).to_have_text("failed")
        expect(broken.locator(".error")).to_contain_text("ConnectError")
        # Test connection again, from the keyboard.
        broken.get_by_role("button", name=f"Test connection to broken{scheme}").focus()
        page.keyboard.press("Enter")
        again = page.locator(".mcp-server", has_text=f"broken{scheme}")
        expect(again.get_by_role("button", name=f"Test connection to broken{scheme}")).to_be_focused()  # done
        expect(again.locator(".mcp-state")).to_have_text("failed")
        wide = page.evaluate(WIDE)
        assert not wide, wide
        screenshot(page, f"mcp-settings-{scheme}")
        assert not axe_serious(page)
        page.once("dialog", lambda dialog: dialog.accept())
        page.locator(".mcp-server", has_text=f"broken{scheme}").get_by_role("button", name=f"Delete broken{scheme}").click()
        expect(page.locator(".mcp-server", has_text=f"broken{scheme}")).to_have_count(0)
    finally:
        context.close()


def test_paste_a_config_allow_without_asking_and_live_state(browser, login_state, navi, test_server):
    """Issue 39 items 5 and 7: a pasted Claude Desktop config adds the good server and names the
    bad one; the allow switch is kept; a server killed while idle turns `failed` without a reload."""
    import json

    context, page = new_page(browser, login_state, viewport={"width": 390, "height": 800})
    try:
        page.goto(f"{navi.url}/settings/")
        page.wait_for_selector("body[data-mcp-ready='1']")
        config = {"mcpServers": {"pasted": {"url": test_server.url}, "bad name!": {"url": test_server.url}}}
        page.fill("#mcp-import-text", json.dumps(config))
        page.get_by_role("button", name="Import servers").focus()
        page.keyboard.press("Enter")
        expect(page.locator("#mcp-import-errors")).to_contain_text("bad name!:")
        pasted = page.locator(".mcp-server", has_text="pasted")
        expect(pasted.locator(".mcp-state")).to_have_text("connected", timeout=20000)
        pasted.locator("summary", has_text="tool(s)").focus()
        page.keyboard.press("Enter")  # the tool list opens
        one = pasted.get_by_label("Allow add without asking")  # one tool, by its name
        one.focus()
        page.keyboard.press("Space")
        expect(page.locator(".mcp-server", has_text="pasted").get_by_label("Allow add without asking")).to_be_checked()
        expect(page.locator(".mcp-server", has_text="pasted").get_by_label("Allow add without asking")).to_be_focused()
        expect(page.locator(".mcp-server", has_text="pasted").get_by_label("Allow weather without asking")
               ).not_to_be_checked()
        switch = pasted.get_by_label("Allow all its tools without asking")
        switch.focus()
        page.keyboard.press("Space")
        expect(page.locator(".mcp-server", has_text="pasted").get_by_label("Allow all its tools without asking")
               ).to_be_checked()
        # Both were stored, the quick second change built on the first (each tool switch now
        # shows the server-wide allow).
        pasted_id = int(page.locator(".mcp-server", has_text="pasted").get_attribute("data-id"))
        with navi.api() as api:
            stored = mcp_support.poll_server(api, pasted_id, lambda b: b["auto_approve"], 15)
        assert stored["auto_approve"] and stored["auto_approve_tools"] == ["add"], stored
        page.fill("#mcp-import-text", "{not json")
        page.get_by_role("button", name="Import servers").click()
        expect(page.locator("#mcp-import-errors")).to_contain_text("Not valid JSON")
        assert not page.evaluate(WIDE)
        assert not axe_serious(page)
        in_use = page.locator(".mcp-server", has_text="pasted").get_by_label("Allow all its tools without asking")
        in_use.focus()  # the item in use follows too, and keeps the focus
        test_server.stop()  # killed while idle: the page follows without a reload
        expect(page.locator(".mcp-server", has_text="pasted").locator(".mcp-state")).to_have_text(
            "failed", timeout=40000)
        expect(page.locator(".mcp-server", has_text="pasted").locator("p.error")).to_contain_text(
            re.compile("stopped answering|cannot reach"))
        expect(in_use).to_be_focused()
    finally:
        context.close()


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_a_pasted_config_s_folders_wait_for_the_owner_and_nothing_is_re_owned(browser, login_state, navi, tmp_path,
                                                                              scheme):
    """Issue 50 item 1: the folders a pasted stdio entry names are listed on its card, shown to it
    only once confirmed (read-only unless "writable" is ticked); no owner or mode changes."""
    import json
    import os

    notes = tmp_path / f"notes-{scheme}"
    (notes / ".git").mkdir(parents=True)
    before = {p: (p.stat().st_uid, p.stat().st_mode) for p in (notes, notes / ".git")}
    context, page = new_page(browser, login_state, color_scheme=scheme, viewport={"width": 390, "height": 800})
    try:
        page.goto(f"{navi.url}/settings/")
        page.wait_for_selector("body[data-mcp-ready='1']")
        name = f"files{scheme}"
        page.fill("#mcp-import-text", json.dumps({"mcpServers": {name: {"command": "cat", "args": [str(notes)]}}}))
        page.get_by_role("button", name="Import servers").click()
        card = page.locator(".mcp-server", has_text=name)
        expect(card.locator(".mcp-pending")).to_contain_text(str(notes))
        expect(card.locator("p.error")).to_contain_text("confirm the folders", timeout=20000)
        assert not page.evaluate(WIDE)
        card.locator(".mcp-pending").scroll_into_view_if_needed()
        screenshot(page, f"mcp-settings-pending-{scheme}")
        assert not axe_serious(page)
        if os.geteuid() == 0:  # a folder of root's is never made writable: the page says why
            card.get_by_label(f"Let {name} write in {notes}").check()
            card.get_by_role("button", name=f"Show {notes} to {name}").click()
            expect(page.locator(".toast").last).to_contain_text("belongs to root")
            card.get_by_label(f"Let {name} write in {notes}").uncheck()
        button = page.locator(".mcp-server", has_text=name).get_by_role("button", name=f"Show {notes} to {name}")
        button.focus()
        page.keyboard.press("Enter")
        card = page.locator(".mcp-server", has_text=name)
        expect(card.locator(".mcp-pending")).to_have_count(0)
        card.locator("summary", has_text="Folders it sees").click()
        expect(card).to_contain_text(f"{notes} — read-only")
        assert {p: (p.stat().st_uid, p.stat().st_mode) for p in before} == before
    finally:
        context.close()


def test_a_card_shows_how_its_server_runs_why_it_failed_and_can_be_edited(browser, login_state, navi, test_server):
    """Issue 53 item 7: the command or URL on the card, a failed server's last stderr lines without a
    click, and the card's own Edit (command and arguments, or the URL) — both themes, both widths."""
    script = "echo 'weather server 1.2 starting' >&2; echo 'error: OPENWEATHER_KEY is not set' >&2; exit 3"
    with navi.api() as api:
        stdio = api.post("/mcp/servers", json={"name": "weather", "transport": "stdio", "command": "sh",
                                               "args": ["-c", script]}).json()
        remote = api.post("/mcp/servers", json={"name": "remote", "transport": "http", "url": test_server.url}).json()
    context, page = new_page(browser, login_state)
    try:
        page.goto(f"{navi.url}/settings/")
        page.wait_for_selector("body[data-mcp-ready='1']")
        card = page.locator(f".mcp-server[data-id='{stdio['id']}']")
        expect(card.locator(".mcp-where")).to_contain_text("sh -c")
        expect(card.locator(".mcp-state")).to_have_text("failed", timeout=20000)
        expect(card.locator(".mcp-stderr")).to_contain_text("OPENWEATHER_KEY is not set", timeout=20000)  # no click
        web = page.locator(f".mcp-server[data-id='{remote['id']}']")
        expect(web.locator(".mcp-where")).to_have_text(test_server.url)
        card.scroll_into_view_if_needed()
        looks(page, "06-mcp-cards", axe_serious, f".mcp-server[data-id='{stdio['id']}']")
        assert not page.evaluate(WIDE)
        # Edit the command line: saved and shown.
        card.get_by_role("button", name="Edit weather").click()
        card.locator(".mcp-edit textarea").fill("-c\necho 'error: still no key' >&2; exit 4")
        card.get_by_role("button", name="Save").click()
        card = page.locator(f".mcp-server[data-id='{stdio['id']}']")
        expect(card.locator(".mcp-where")).to_contain_text("still no key")
        expect(card.locator(".mcp-stderr")).to_contain_text("error: still no key", timeout=20000)
        # Edit the URL of the HTTP one.
        broken = f"http://127.0.0.1:{free_port()}/mcp"
        web.get_by_role("button", name="Edit remote").click()
        web.locator(".mcp-edit input").fill(broken)
        web.get_by_role("button", name="Save").click()
        web = page.locator(f".mcp-server[data-id='{remote['id']}']")
        expect(web.locator(".mcp-where")).to_have_text(broken)
        expect(web.locator(".mcp-state")).to_have_text("failed", timeout=20000)
        with navi.api() as api:
            assert api.get(f"/mcp/servers/{remote['id']}").json()["url"] == broken
    finally:
        with navi.api() as api:
            for server in (stdio, remote):
                api.delete(f"/mcp/servers/{server['id']}")
        context.close()
