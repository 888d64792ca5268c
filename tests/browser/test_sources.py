"""An answer that used the owner's documents shows its sources as chips under it (issue #42):
each chip is a button that opens the passage (its text inserted as text, never HTML) with the
document's name and place and a link to the document on the Knowledge page; a reload shows the
same; keyboard, both themes and phone width, checked with axe-core."""

from __future__ import annotations

import json
import shutil
import time

import pytest
from playwright.sync_api import expect

from tests.browser.test_daily import axe_serious, new_page, open_chat, send
from tests.browser_support import CHROMIUM, looks, screenshot
from tests.live_server import LiveNavi
from tests.llm_server import Rule, Turn

pytestmark = pytest.mark.skipif(not shutil.which(CHROMIUM), reason="needs Debian's chromium (apt-get install chromium)")

# The passage tries markup: it must show as the characters it is.
BOILER = ("# Heating\n\nThe boiler service is every October. <img src=x onerror=\"document.title='pwned'\">"
          "<b>not bold</b>\n\n# Garden\n\nThe hedge is cut in June, once the birds have finished nesting in it.")


@pytest.fixture(scope="module")
def navi(live_llm):
    """The module's server with a job worker beside it (as `make run`): uploads are indexed."""
    with LiveNavi(env={"OLLAMA_HOST": live_llm.url, "CHAT_TITLES": "first_words", "NAVI_JOB_WORKERS": "1"}) as server:
        yield server


@pytest.fixture(scope="module")
def boiler_document(navi):
    """boiler.md in the owner's Knowledge, indexed (embedded by the test LLM's /api/embed)."""
    with navi.api() as client:
        made = client.post("/knowledge", files={"file": ("boiler.md", BOILER.encode(), "text/markdown")})
        assert made.status_code in (200, 201), made.text
        document = made.json()
        deadline = time.monotonic() + 60
        while document["status"] in ("queued", "indexing") and time.monotonic() < deadline:
            time.sleep(0.2)  # polling the REST API, as the page does, until indexing ends
            document = client.get(f"/knowledge/{document['id']}").json()
        assert document["status"] == "ready", document
    return document


def _script(live_llm, match: str, answer: str) -> None:
    live_llm.reset()
    live_llm.add_rule(Rule(system="planning step", match="", turns=[Turn(content="DIRECT")]))
    live_llm.add_rule(Rule(match=match, turns=[
        Turn(tool_calls=[{"name": "knowledge_search", "arguments": {"query": "boiler service"}}]),
        Turn(content=answer),
    ]))


@pytest.mark.parametrize("scheme,width", [("light", 1200), ("dark", 390)])
def test_source_chips_open_the_passage_by_keyboard_in_both_themes(browser, login_state, navi, live_llm,
                                                                 boiler_document, scheme, width):
    _script(live_llm, "when is the boiler serviced", "Every October (boiler.md, section “Heating”).")
    context, page = new_page(browser, login_state, color_scheme=scheme, viewport={"width": width, "height": 800})
    try:
        open_chat(page, navi)
        send(page, "when is the boiler serviced")
        chip = page.locator(".group.turn .sources button.chip.source")
        expect(chip).to_have_count(1)
        expect(chip).to_contain_text("boiler.md")
        expect(chip).to_contain_text("Heating (line 1)")  # the section, named as the tool cites it
        assert chip.get_attribute("title") == "Open the passage from boiler.md › Heating (line 1)"
        expect(page.locator(".sources")).to_have_attribute("aria-label", "Sources of this answer")
        screenshot(page, f"sources-1-chips-{scheme}-{width}")
        # Keyboard: focus the chip, Enter opens the passage; its focus ring is drawn.
        chip.focus()
        assert page.evaluate("() => getComputedStyle(document.activeElement).outlineStyle") == "solid"
        page.keyboard.press("Enter")
        dialog = page.locator("dialog.passage-dialog")
        expect(dialog).to_be_visible()
        expect(dialog.locator("h2")).to_have_text("boiler.md")
        expect(dialog.locator(".passage-where")).to_have_text("Heating (line 1)")
        text = dialog.locator(".passage-text")
        expect(text).to_contain_text("The boiler service is every October.")
        expect(text.locator("mark")).to_have_text(["boiler", "service"])  # the search's words, marked
        expect(text).to_contain_text("<img src=x")  # markup shown as text
        assert text.locator("img, b").count() == 0 and page.title() != "pwned"
        expect(text).not_to_contain_text("hedge")  # that passage only
        link = dialog.get_by_role("link", name="Open the document at this passage")
        assert link.get_attribute("href").startswith(f"/knowledge/{boiler_document['id']}/view#passage-")
        # Nothing inside the dialog overflows a phone's width.
        box = dialog.bounding_box()
        assert box["x"] >= 0 and box["x"] + box["width"] <= width
        screenshot(page, f"sources-2-passage-{scheme}-{width}")
        found = axe_serious(page)
        assert not found, json.dumps(found, indent=1)
        page.keyboard.press("Escape")
        expect(dialog).to_be_hidden()
        expect(chip).to_be_focused()  # back where the reader was
        # A reload draws the same chips from the stored message.
        page.reload()
        page.wait_for_selector("body[data-ready='1']")
        expect(page.locator(".group.turn .sources button.chip.source")).to_have_count(1)
        expect(page.locator(".group.turn .sources")).to_contain_text("boiler.md")
        found = axe_serious(page)
        assert not found, json.dumps(found, indent=1)
        # The link opens the document at that passage: scrolled to, marked, its markup as text.
        page.locator(".group.turn .sources button.chip.source").click()
        with page.expect_navigation():
            page.locator("dialog.passage-dialog .passage-link").click()
        page.wait_for_selector("body[data-ready='1']")
        cited = page.locator(".doc-passage.cited")
        expect(cited).to_have_count(1)
        expect(cited).to_have_attribute("aria-current", "true")
        expect(cited).to_contain_text("The boiler service is every October.")
        expect(cited).to_contain_text("<img src=x")
        expect(cited).to_be_in_viewport()
        assert page.locator(".doc-passage img, .doc-passage b").count() == 0 and page.title() != "pwned"
        expect(page.locator(".doc-passage")).to_have_count(2)  # the other passage is there, not marked
        expect(page.locator(".document-facts")).to_contain_text("Markdown")
        expect(page.get_by_role("link", name="Download the original file")).to_be_visible()
        found = axe_serious(page)
        assert not found, json.dumps(found, indent=1)
        screenshot(page, f"sources-3-document-{scheme}-{width}")
    finally:
        context.close()


def test_a_passage_that_is_gone_says_so(browser, login_state, navi, live_llm, boiler_document):
    _script(live_llm, "boiler once more", "Every October (boiler.md).")
    context, page = new_page(browser, login_state)
    try:
        open_chat(page, navi)
        send(page, "boiler once more")
        chip = page.locator(".group.turn .sources button.chip.source").first
        expect(chip).to_be_visible()
        # The chip's passage, as if deleted since (or another user's: the same 404).
        with navi.api() as client:
            assert client.get("/knowledge/passages/999999999").status_code == 404
        page.route("**/knowledge/passages/*", lambda route: route.continue_(url=f"{navi.url}/knowledge/passages/999999999"))
        chip.click()
        gone = page.locator("dialog.passage-dialog .passage-text.gone")
        expect(gone).to_contain_text("This passage cannot be shown: no passage")
        expect(gone).to_contain_text("search the Knowledge page")
        screenshot(page, "sources-4-gone")
    finally:
        context.close()


def test_an_imported_chat_with_malformed_sources_still_renders(browser, login_state, navi):
    from sessions_app.transfer import FORMAT, VERSION

    answers = [{"passage_id": 1, "document_id": "d", "name": "ok.md", "where": "page 2"}, "junk", None, {"x": 1}]
    messages = [{"seq": 1, "role": "user", "content": "q1"},
                {"seq": 2, "role": "assistant", "content": "answer one", "meta": {"sources": "not a list"}},
                {"seq": 3, "role": "user", "content": "q2"},
                {"seq": 4, "role": "assistant", "content": "answer two", "meta": {"sources": {"a": 1}}},
                {"seq": 5, "role": "user", "content": "q3"},
                {"seq": 6, "role": "assistant", "content": "answer three", "meta": {"sources": answers}}]
    export = {"format": FORMAT, "version": VERSION, "session": {"title": "imported sources"}, "messages": messages}
    with navi.api() as client:
        made = client.post("/sessions/import", json=export)
        assert made.status_code == 201, made.text
        sid = made.json()["session_id"]
    context, page = new_page(browser, login_state)
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        open_chat(page, navi, sid)
        expect(page.locator(".bubble.assistant")).to_have_count(3)
        expect(page.locator(".sources")).to_have_count(1)  # only the answer with a well-formed source
        expect(page.locator(".sources button.chip.source")).to_have_text("ok.mdpage 2")
        assert errors == []
    finally:
        context.close()


def test_a_document_opens_with_its_file_and_a_search_marks_the_words_and_the_score(browser, login_state, navi,
                                                                                 boiler_document):
    """Issue 53 item 6: the Knowledge page opens a document (passages, size and type, the original
    file as a download); a search result marks the matching words, shows its score and opens there."""
    context, page = new_page(browser, login_state)
    try:
        page.goto(f"{navi.url}/knowledge")  # without the slash: the page
        page.locator(f"#document-{boiler_document['id']} a.document-name").click()
        page.wait_for_selector("body[data-ready='1']")
        assert page.url.endswith(f"/knowledge/{boiler_document['id']}/view")
        expect(page.locator("h1")).to_have_text("boiler.md")
        expect(page.locator(".doc-passage.cited")).to_have_count(0)
        with page.expect_download() as download:
            page.get_by_role("link", name="Download the original file").click()
        assert download.value.suggested_filename == "boiler.md"
        assert open(download.value.path(), encoding="utf-8").read() == BOILER
        page.goto(f"{navi.url}/knowledge/")
        page.fill("#q", "hedge June")
        page.click("#search-form button[type=submit]")
        first = page.locator("#results li.result").first
        expect(first.locator("mark").first).to_have_text("hedge")
        expect(first.locator("mark")).to_have_text(["hedge", "June"])
        expect(first.locator(".score")).to_contain_text("score 0.")
        looks(page, "08-knowledge-search", axe_serious, "#results")
        first.get_by_role("link", name="boiler.md").click()
        page.wait_for_selector("body[data-ready='1']")
        expect(page.locator(".doc-passage.cited")).to_contain_text("The hedge is cut in June,")
        looks(page, "09-knowledge-document", axe_serious, ".doc-passage.cited")
    finally:
        context.close()
    with navi.api() as client:  # the file of another account: a 404, like a missing one
        token = navi.add_user("stranger")
        client.headers["Authorization"] = f"Bearer {token}"
        assert client.get(f"/knowledge/{boiler_document['id']}/file").status_code == 404
        assert client.get(f"/knowledge/{boiler_document['id']}/view").status_code == 404
