"""Shared pieces of the browser tests and the UI benchmark: Debian's Chromium driven by
Playwright (no `playwright install`), a live Navi server and the protocol-level test LLM."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = ROOT / "tests" / "artifacts"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@contextmanager
def chromium_browser(extra_args: tuple[str, ...] = ()) -> Iterator:
    """A headless Chromium (the system one) for one module or one benchmark."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=[*CHROMIUM_ARGS, *extra_args])
        try:
            yield browser
        finally:
            browser.close()


def log_in(page, navi) -> None:
    """Log in through the real login form and wait until the chat page is ready."""
    page.goto(f"{navi.url}/login/")
    page.fill("input[name=username]", navi.username)
    page.fill("input[name=password]", navi.password)
    page.click("button[type=submit]")
    page.wait_for_url(f"{navi.url}/**")
    page.wait_for_selector("body[data-ready='1']")


def screenshot(page, name: str) -> None:
    """Save a screenshot for humans under tests/artifacts/ (gitignored)."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    # Not in the middle of a transition (the phone drawer slides in over 0.2 s).
    # (evaluate, not wait_for_function: the page's CSP forbids the eval the latter needs)
    page.evaluate(
        "Promise.all(document.getAnimations().filter(a => a.effect?.getTiming().iterations !== Infinity)"
        ".map(a => a.finished.catch(() => null)))"
    )
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=False)


LOOKS = [("desktop", {"width": 1280, "height": 800}), ("phone", {"width": 390, "height": 844})]


def looks(page, name: str, axe_serious, anchor: str | None = None) -> None:
    """The page at both widths in both themes, without loading it again: a screenshot each
    (`setup-<name>-<width>-<theme>`), `axe_serious` (tests/browser/test_daily.py) at none, no sideways scroll."""
    for width, viewport in LOOKS:
        page.set_viewport_size(viewport)
        for scheme in ("light", "dark"):
            page.emulate_media(color_scheme=scheme)
            if anchor:
                page.locator(anchor).scroll_into_view_if_needed()
            screenshot(page, f"setup-{name}-{width}-{scheme}")
            assert axe_serious(page) == [], (width, scheme)
            assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1"), (width, scheme)
    page.set_viewport_size(LOOKS[0][1])
