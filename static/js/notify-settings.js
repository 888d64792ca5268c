// The settings page's Notifications section: push on this device (service worker + Push API,
// subscribed with the server's VAPID key), Apprise URLs, and the list of targets with
// "Send a test" and "Remove" (GET/POST/DELETE /settings/notify, POST /settings/notify/<id>/test).
import { api } from "./api.js";
import { el } from "./cards.js";
import { $, toast, when } from "./pagekit.js";

const PUSH_TARGET_KEY = "navi-push-target"; // this device's target id, to remove it again
let vapidKey = "";

function pushStatus(text) {
  $("#push-status").textContent = text;
}

function keyBytes(base64url) {
  const base64 = base64url.replace(/-/g, "+").replace(/_/g, "/") + "=".repeat((4 - (base64url.length % 4)) % 4);
  return Uint8Array.from(atob(base64), (c) => c.charCodeAt(0));
}

function sameKey(buffer, base64url) {
  if (!buffer) return false;
  const a = new Uint8Array(buffer);
  const b = keyBytes(base64url);
  return a.length === b.length && a.every((v, i) => v === b[i]);
}

function storedTargetId() {
  try {
    return localStorage.getItem(PUSH_TARGET_KEY);
  } catch {
    return null;
  }
}

function storeTargetId(id) {
  try {
    if (id === null) localStorage.removeItem(PUSH_TARGET_KEY);
    else localStorage.setItem(PUSH_TARGET_KEY, String(id));
  } catch {
    /* storage blocked: "Turn off" then only unsubscribes the browser */
  }
}

// Why push cannot work here ("" = it can).
function pushUnsupported() {
  if (!window.isSecureContext) return "Push needs a secure page: open Navi over https:// (or on localhost) to enable it.";
  if (!("serviceWorker" in navigator) || !("PushManager" in window) || !("Notification" in window)) {
    return "This browser cannot receive push messages; add an Apprise URL below instead.";
  }
  return "";
}

function showPushButtons(on) {
  $("#push-enable").hidden = on;
  $("#push-disable").hidden = !on;
}

async function subscribe(registration) {
  let subscription = await registration.pushManager.getSubscription();
  if (subscription && !sameKey(subscription.options.applicationServerKey, vapidKey)) {
    await subscription.unsubscribe(); // made with another server key: it could never be used
    subscription = null;
  }
  try {
    return subscription || (await registration.pushManager.subscribe({ userVisibleOnly: true, applicationServerKey: keyBytes(vapidKey) }));
  } catch (err) {
    throw new Error(`the browser could not create a push subscription (${err.message}). Its push service may be ` +
      "unreachable from here: try again when online, or add an Apprise URL instead");
  }
}

async function enablePush() {
  const button = $("#push-enable");
  button.disabled = true;
  try {
    pushStatus("Asking for permission…");
    if ((await Notification.requestPermission()) !== "granted") {
      throw new Error("notifications are blocked for Navi in this browser; allow them in the site settings, then try again");
    }
    pushStatus("Subscribing…");
    const registration = await navigator.serviceWorker.register("/sw.js", { scope: "/" });
    await navigator.serviceWorker.ready;
    const subscription = await subscribe(registration);
    const platform = (navigator.userAgentData && navigator.userAgentData.platform) || navigator.platform || "";
    const target = await api.addNotifyTarget({
      kind: "webpush", subscription: subscription.toJSON(), label: platform ? `Browser on ${platform}` : "Browser",
    });
    storeTargetId(target.id);
    showPushButtons(true);
    pushStatus("Push is on for this device. Send a test to check it.");
    await loadTargets();
  } catch (err) {
    pushStatus(`Push is off: ${err.message}`);
  } finally {
    button.disabled = false;
  }
}

async function disablePush() {
  try {
    const registration = await navigator.serviceWorker.getRegistration("/");
    const subscription = registration && (await registration.pushManager.getSubscription());
    if (subscription) await subscription.unsubscribe();
    const id = storedTargetId();
    if (id) await api.removeNotifyTarget(id).catch((err) => (err.status === 404 ? null : Promise.reject(err)));
    storeTargetId(null);
    showPushButtons(false);
    pushStatus("Push is off for this device.");
    await loadTargets();
  } catch (err) {
    toast(`Could not turn push off: ${err.message}`);
  }
}

function deliveryCell(target) {
  const cell = el("td");
  const failedLast = target.last_error_at && (!target.last_ok_at || target.last_error_at > target.last_ok_at);
  if (failedLast) {
    cell.className = "delivery-failed";
    cell.textContent = `Failed ${when(target.last_error_at)}: ${target.last_error}`;
  } else {
    cell.textContent = target.last_ok_at ? `Delivered ${when(target.last_ok_at)}` : "Not used yet";
  }
  return cell;
}

function actionButton(text, className, label, onClick) {
  const button = el("button", className, text);
  button.type = "button";
  button.setAttribute("aria-label", label);
  button.addEventListener("click", onClick);
  return button;
}

function targetRow(target) {
  const tr = el("tr");
  tr.dataset.id = target.id;
  const name = target.label || (target.kind === "webpush" ? "Push" : "Apprise");
  const test = actionButton("Send a test", "test", `Send a test to ${name}`, async () => {
    test.disabled = true;
    try {
      const outcome = await api.testNotifyTarget(target.id);
      if (outcome.ok) pushStatus(`Test sent to ${name}.`);
      else toast(`The test to ${name} failed: ${outcome.error}`);
      if (outcome.removed && String(target.id) === storedTargetId()) {
        storeTargetId(null);
        showPushButtons(false);
      }
      await loadTargets();
    } catch (err) {
      toast(`Could not send the test: ${err.message}`);
    } finally {
      test.disabled = false;
    }
  });
  const remove = actionButton("Remove", "danger-outline remove", `Remove ${name}`, async () => {
    if (!window.confirm(`Remove "${name}"? It gets no more notifications.`)) return;
    try {
      await api.removeNotifyTarget(target.id);
      if (String(target.id) === storedTargetId()) await disablePush();
      else await loadTargets();
    } catch (err) {
      toast(`Could not remove: ${err.message}`);
    }
  });
  const actions = el("td", "actions");
  actions.append(test, remove);
  tr.append(el("td", "", `${name} (${target.kind})`), el("td", "mono", target.address), deliveryCell(target), actions);
  return tr;
}

async function loadTargets() {
  const data = await api.notifyTargets();
  vapidKey = data.vapid_public_key;
  $("#notify-targets tbody").replaceChildren(...data.targets.map(targetRow));
  $("#notify-empty").hidden = data.targets.length > 0;
  $("#notify-targets").hidden = data.targets.length === 0;
  return data.targets;
}

async function showPushState(targets) {
  const why = pushUnsupported();
  if (why) {
    $("#push-enable").disabled = true;
    pushStatus(why);
    return;
  }
  const registration = await navigator.serviceWorker.getRegistration("/");
  const subscription = registration && (await registration.pushManager.getSubscription());
  const id = storedTargetId();
  showPushButtons(Boolean(subscription && id && targets.some((t) => String(t.id) === id)));
}

async function start() {
  $("#push-enable").addEventListener("click", enablePush);
  $("#push-disable").addEventListener("click", disablePush);
  $("#new-apprise").addEventListener("submit", async (e) => {
    e.preventDefault();
    try {
      await api.addNotifyTarget({ kind: "apprise", url: $("#apprise-url").value.trim(), label: $("#apprise-label").value.trim() });
      $("#apprise-url").value = "";
      $("#apprise-label").value = "";
      await loadTargets();
    } catch (err) {
      toast(`Could not add the URL: ${err.message}`);
    }
  });
  try {
    await showPushState(await loadTargets());
    document.body.dataset.notifyReady = "1";
  } catch (err) {
    toast(`Could not load your notification targets: ${err.message}`);
  }
}

start();
