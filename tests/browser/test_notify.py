"""The settings page's Notifications section and the service worker in real headless Chromium.

Headless Chromium cannot make a push subscription here: `pushManager.subscribe` fails with
"AbortError: Registration failed - permission denied" even with the notifications permission
granted (no push service — FCM — behind it, and no network). So the test drives the real
attempt up to that point and checks the page's error; it hands push messages to the registered
service worker through DevTools (ServiceWorker.deliverPushMessage) and reads the notifications
it shows; then it gives the page a PushManager whose
subscribe returns a subscription of the local push service (tests.notify_services), and checks
that the subscription reaches the server, a test push arrives decrypted, an expired one is
removed, and the Apprise URL field, its error and the list work — by mouse and keyboard, in
both themes and at phone width.
"""

from __future__ import annotations

import base64
import json
import shutil

import pytest
from playwright.sync_api import expect

from tests.browser.test_daily import axe_serious, new_page
from tests.browser_support import CHROMIUM, screenshot
from tests.live_server import LiveNavi
from tests.notify_services import PushService, Receiver

pytestmark = pytest.mark.skipif(not shutil.which(CHROMIUM), reason="needs Debian's chromium (apt-get install chromium)")

FAKE_PUSH_MANAGER = """
window.__subscribed = [];
PushManager.prototype.getSubscription = async function () { return null; };
PushManager.prototype.subscribe = async function (options) {
  window.__subscribed.push(Array.from(new Uint8Array(options.applicationServerKey)));
  const sub = %s;
  return { options: { applicationServerKey: options.applicationServerKey }, toJSON: () => sub,
           unsubscribe: async () => true };
};
"""


@pytest.fixture(scope="module")
def services():
    with PushService() as push, Receiver(status=500) as failing:
        yield push, failing


@pytest.fixture(scope="module")
def navi(live_llm, services):
    """This module's server may reach the local push service and receiver over plain http."""
    push, failing = services
    env = {
        "OLLAMA_HOST": live_llm.url,
        "NOTIFY_ALLOW_HTTP_PUSH": "true",
        "HTTP_ALLOWED_HOSTS": f"127.0.0.1:{push.port},127.0.0.1:{failing.port}",
    }
    with LiveNavi(env=env) as server:
        yield server


SHOWN_NOTIFICATIONS = """async (tag) => {
  for (let i = 0; i < 100; i++) {  // the worker shows it asynchronously: wait for it, 10 s at most
    const registration = await navigator.serviceWorker.getRegistration("/");
    const shown = await registration.getNotifications();
    if (shown.some((n) => n.tag === tag)) {
      return shown.map((n) => ({title: n.title, body: n.body, tag: n.tag, url: n.data.url}));
    }
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  return [];
}"""


def _deliver_push(context, page, navi, payload: dict) -> list[dict]:
    """Hand `payload` to the page's service worker as a push message; the notifications shown."""
    cdp = context.new_cdp_session(page)
    registrations: list[dict] = []
    cdp.on("ServiceWorker.workerRegistrationUpdated", lambda event: registrations.extend(event["registrations"]))
    cdp.send("ServiceWorker.enable")  # reports the existing registrations, as events
    for _ in range(50):  # events sent before a reply are handled before it: a round trip is a barrier
        if registrations:
            break
        cdp.send("Runtime.evaluate", {"expression": "1"})
    [registration_id] = {r["registrationId"] for r in registrations if not r.get("isDeleted")}
    cdp.send(
        "ServiceWorker.deliverPushMessage",
        {"origin": navi.url, "registrationId": registration_id, "data": json.dumps(payload)},
    )
    shown = page.evaluate(SHOWN_NOTIFICATIONS, payload["tag"])
    cdp.detach()
    return shown


def _server_targets(page, navi) -> list[dict]:
    return page.request.get(f"{navi.url}/settings/notify").json()["targets"]


def test_push_and_apprise_from_the_settings_page(browser, navi, login_state, services):
    push, failing = services
    context, page = new_page(browser, login_state)
    context.grant_permissions(["notifications"], origin=navi.url)
    page.goto(f"{navi.url}/settings/")
    page.wait_for_selector("body[data-notify-ready='1']")
    expect(page.locator("#notify-empty")).to_be_visible()

    # 1. The real attempt: permission granted, the worker registered at the root, and the
    # browser's refusal shown as the page's error — nothing reaches the server.
    page.click("#push-enable")
    expect(page.locator("#push-status")).to_contain_text(
        "Push is off: the browser could not create a push subscription"
    )
    expect(page.locator("#push-status")).to_contain_text("add an Apprise URL instead")
    scope = page.evaluate("navigator.serviceWorker.getRegistration('/').then((r) => r && r.scope)")
    assert scope == f"{navi.url}/"
    assert _server_targets(page, navi) == []
    # The worker shows a push as a notification (delivered through DevTools, as a push service
    # would), opening only this site's pages whatever the payload says.
    assert _deliver_push(
        context, page, navi, {"title": "Navi answered", "body": "All done.", "url": "/#abc", "tag": "navi-chat-abc"}
    ) == [{"title": "Navi answered", "body": "All done.", "tag": "navi-chat-abc", "url": f"{navi.url}/#abc"}]
    shown = _deliver_push(context, page, navi, {"title": "x", "body": "y", "url": "https://evil.example/", "tag": "t2"})
    assert [n["url"] for n in shown if n["tag"] == "t2"] == [f"{navi.url}/"]
    context.close()

    # 2. A PushManager that can subscribe (to the local push service), keyboard only.
    context, page = new_page(browser, login_state, viewport={"width": 390, "height": 800}, color_scheme="dark")
    context.grant_permissions(["notifications"], origin=navi.url)
    key = page.request.get(f"{navi.url}/settings/notify").json()["vapid_public_key"]
    device = push.subscribe(key)
    context.add_init_script(FAKE_PUSH_MANAGER % json.dumps(device.subscription()))
    page.goto(f"{navi.url}/settings/")
    page.wait_for_selector("body[data-notify-ready='1']")
    page.focus("#push-enable")
    page.keyboard.press("Enter")
    expect(page.locator("#push-status")).to_contain_text("Push is on for this device")
    expect(page.locator("#push-disable")).to_be_visible()
    [target] = _server_targets(page, navi)
    assert target["kind"] == "webpush" and target["address"] == f"{push.origin}/…"
    subscribed_with = page.evaluate("window.__subscribed[0]")
    assert bytes(subscribed_with) == base64.urlsafe_b64decode(key + "=")  # the server's VAPID key
    row = page.locator(f"#notify-targets tr[data-id='{target['id']}']")
    expect(row).to_contain_text("Not used yet")
    row.locator("button.test").focus()
    page.keyboard.press("Enter")
    expect(page.locator("#push-status")).to_contain_text("Test sent to")
    expect(row).to_contain_text("Delivered")
    assert push.received[-1]["payload"]["title"] == "Navi test notification"
    screenshot(page, "notify-01-phone-dark")

    # 3. The subscription expires at the push service: the test says so and the target goes.
    push.gone.add(device.endpoint.removeprefix(push.origin))
    row.locator("button.test").click()
    expect(page.locator(".toast").last).to_contain_text("has expired")
    expect(page.locator("#notify-targets tbody tr")).to_have_count(0)
    expect(page.locator("#push-enable")).to_be_visible()
    context.close()

    # 4. Apprise: a URL Apprise cannot read is refused with the reason; a service that fails
    # shows its error on the test and in the list; the URL never comes back whole.
    context, page = new_page(browser, login_state)
    page.goto(f"{navi.url}/settings/")
    page.wait_for_selector("body[data-notify-ready='1']")
    page.fill("#apprise-url", "nosuchservice://abc")
    page.click("#new-apprise button[type=submit]")
    expect(page.locator(".toast").last).to_contain_text("Apprise cannot read this URL")
    secret_url = f"json://hookuser:pa55word@127.0.0.1:{failing.port}/hook-secret"
    page.fill("#apprise-url", secret_url)
    page.fill("#apprise-label", "home server")
    page.press("#apprise-label", "Enter")
    row = page.locator("#notify-targets tbody tr", has_text="home server")
    expect(row).to_contain_text(f"json://…@127.0.0.1:{failing.port}/hoo***")
    expect(page.locator("#apprise-url")).to_have_value("")
    row.locator("button.test").click()
    expect(page.locator(".toast").last).to_contain_text("The test to home server failed")
    expect(row.locator(".delivery-failed")).to_contain_text("500")
    assert "pa55word" not in page.content() and "hook-secret" not in page.content()
    assert len(failing.received) == 1
    screenshot(page, "notify-02-apprise-light")
    found = {"light": axe_serious(page)}
    page.emulate_media(color_scheme="dark")
    found["dark"] = axe_serious(page)
    assert found == {"light": [], "dark": []}
    row.locator("button.remove").click()  # new_page accepts the confirm dialog
    expect(page.locator("#notify-targets tbody tr")).to_have_count(0)
    assert _server_targets(page, navi) == []
    context.close()
