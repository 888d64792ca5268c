"""Module fixtures of the browser tests: one test LLM, one live Navi server, one headless
Chromium and one login per test module."""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.sync_api import expect

from tests.browser_support import chromium_browser, log_in
from tests.live_server import LiveNavi
from tests.llm_server import LLMServer

VENDOR = Path(__file__).resolve().parents[2] / "static" / "vendor"


@pytest.fixture(scope="module", autouse=True)
def _vendored_libraries():
    """The chat page needs its JS libraries (marked, DOMPurify, highlight.js) from static/vendor."""
    if not (VENDOR / "marked.esm.js").exists() or not (VENDOR / "purify.es.mjs").exists():
        pytest.skip("static/vendor is missing the chat page's JS libraries: run `make vendor` (npm ci) first")


@pytest.fixture(scope="module")
def live_llm():
    """The module's protocol-level test LLM; each test's page fixture resets it."""
    with LLMServer() as server:
        yield server


@pytest.fixture(scope="module")
def navi(live_llm):
    with LiveNavi(env={"OLLAMA_HOST": live_llm.url, "CHAT_TITLES": "first_words"}) as server:
        yield server


@pytest.fixture(scope="module")
def browser():
    expect.set_options(timeout=30_000)  # a loaded 2-core machine (CI, a full run beside others): an answer can take 15 s+
    with chromium_browser() as b:
        yield b


@pytest.fixture(scope="module")
def login_state(browser, navi, tmp_path_factory):
    """Log in once through the real form; the module's tests reuse the cookies."""
    context = browser.new_context()
    page = context.new_page()
    log_in(page, navi)
    path = tmp_path_factory.mktemp("browser") / "state.json"
    context.storage_state(path=str(path))
    context.close()
    return str(path)
