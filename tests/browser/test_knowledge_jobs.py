"""The Knowledge page while documents wait for a job worker and are indexed (issue 51), in a real
browser: "Queued (1st in line)", "(2nd in line)" and a notice that no worker runs; once a worker
starts, "Ready" (said once in a polite live region); the statuses change in place, so the
keyboard focus on a document's Delete button stays; axe-core finds nothing serious."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest
from playwright.sync_api import expect

from tests.browser.test_daily import axe_serious, new_page
from tests.browser_support import CHROMIUM, screenshot
from tests.live_server import ROOT, LiveNavi

pytestmark = pytest.mark.skipif(not shutil.which(CHROMIUM), reason="needs Debian's chromium (apt-get install chromium)")


@pytest.fixture(scope="module")
def navi(live_llm):
    """No job worker beside the server: the test starts one when it wants the queue to move."""
    with LiveNavi(env={"OLLAMA_HOST": live_llm.url, "NAVI_JOB_WORKERS": "0", "JOBS_POLL_S": "0.1"}) as server:
        yield server


def test_queued_with_its_place_then_ready_in_place_and_said_once(browser, login_state, navi):
    context, page = new_page(browser, login_state)
    try:
        with navi.api() as api:
            first = api.post("/knowledge", files={"file": ("first.txt", b"The shed key hangs by the door.")}).json()
            api.post("/knowledge", files={"file": ("second.txt", b"The bike pump is in the shed.")})
        page.goto(f"{navi.url}/knowledge/")
        item = page.locator(f"#document-{first['id']}")
        expect(item.locator(".document-status")).to_have_text("Queued (1st in line)")
        expect(page.locator("li.document", has_text="second.txt").locator(".document-status")).to_have_text(
            "Queued (2nd in line)")
        expect(page.locator("#jobs-notice")).to_contain_text("no job worker is running")
        assert axe_serious(page) == []
        screenshot(page, "knowledge-queued")
        delete = item.get_by_role("button", name="Delete first.txt")
        delete.focus()
        worker = subprocess.Popen([sys.executable, "manage.py", "db_worker"], cwd=ROOT, env=navi.env,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            expect(item.locator(".document-status")).to_have_text("Ready — 1 passage", timeout=30_000)
            expect(page.locator("li.document", has_text="second.txt").locator(".document-status")).to_have_text(
                "Ready — 1 passage", timeout=30_000)
            expect(delete).to_be_focused()  # redrawn in place: the keyboard stays where it was
            expect(page.locator("#doc-live")).to_have_attribute("aria-live", "polite")
            expect(page.locator("#doc-live")).to_contain_text("Ready — 1 passage")
            expect(page.locator("#jobs-notice")).to_be_hidden()
            expect(item.locator("progress")).to_be_hidden()
            assert axe_serious(page) == []
        finally:
            worker.terminate()
            worker.wait(timeout=30)
    finally:
        context.close()
