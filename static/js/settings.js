// The settings page: theme, default profile, "notify when done" (GET/PATCH /settings) and API
// tokens (list, create — the secret is shown once —, revoke).
import { api } from "./api.js";
import { el } from "./cards.js";
import { $, copyText, toast, when } from "./pagekit.js";
import { startTelegram } from "./telegram.js";
import { applyTheme } from "./theme.js";

async function savePref(changes) {
  const status = $("#prefs-status");
  try {
    const prefs = await api.saveSettings(changes);
    if ("theme" in changes) applyTheme(prefs.theme);
    status.textContent = "Saved.";
    setTimeout(() => (status.textContent = ""), 2000);
    return prefs;
  } catch (err) {
    toast(`Could not save: ${err.message}`);
    return null;
  }
}

async function loadPrefs() {
  const [prefs, profiles] = await Promise.all([api.settings(), api.profiles()]);
  const select = $("#default-profile");
  for (const p of profiles) {
    const option = el("option", "", p.name || p.id);
    option.value = p.id;
    select.append(option);
  }
  $("#theme").value = prefs.theme || "system";
  applyTheme(prefs.theme);
  select.value = prefs.default_profile || "";
  $("#notify").checked = !!prefs.notify_when_done;
  const zones = $("#time-zone");
  const names = new Set(Intl.supportedValuesOf ? Intl.supportedValuesOf("timeZone") : []);
  names.add(prefs.time_zone);
  for (const zone of [...names].sort()) {
    const option = el("option", "", zone);
    option.value = zone;
    zones.append(option);
  }
  zones.value = prefs.time_zone || "";
}

/** A cell that names its column on a phone, where the table's head is hidden. */
function labelled(td, label) {
  td.dataset.label = label;
  return td;
}

function tokenRow(token) {
  const tr = el("tr");
  tr.dataset.id = token.id;
  const revoke = el("button", "danger-outline revoke", "Revoke");
  revoke.type = "button";
  revoke.setAttribute("aria-label", `Revoke token ${token.name || token.prefix}`);
  revoke.addEventListener("click", async () => {
    if (!window.confirm(`Revoke "${token.name || token.prefix}"? Scripts using it stop working.`)) return;
    try {
      await api.revokeToken(token.id);
      tr.remove();
      const box = $("#token-created");
      if (box.dataset.tokenId === String(token.id)) hideCreated(box); // a revoked secret is not "to copy now"
    } catch (err) {
      toast(`Could not revoke: ${err.message}`);
    }
  });
  const actions = el("td");
  actions.append(revoke);
  const cell = (cls, text, label) => labelled(el("td", cls, text), label);
  tr.append(cell("", token.name || "—", "Name"), cell("mono", `${token.prefix}…`, "Starts with"),
    cell("", when(token.created_at), "Created"), cell("", when(token.last_used), "Last used"), actions);
  return tr;
}

function hideCreated(box) {
  box.replaceChildren();
  box.hidden = true;
  delete box.dataset.tokenId;
}

function showCreated(created) {
  const box = $("#token-created");
  const code = el("code", "secret", created.token);
  const copy = el("button", "copy-token", "Copy");
  copy.type = "button";
  copy.setAttribute("aria-label", "Copy the new token");
  copy.addEventListener("click", async () => {
    try {
      await copyText(created.token);
      copy.textContent = "Copied";
    } catch {
      toast("Could not copy: select the token and copy it by hand.");
    }
  });
  const done = el("button", "link", "Done");
  done.type = "button";
  done.addEventListener("click", () => {
    hideCreated(box);
    $("#token-name").focus();
  });
  box.replaceChildren(el("strong", "", "Copy this token now — it is not shown again: "), code, " ", copy, " ", done);
  box.dataset.tokenId = String(created.id);
  box.hidden = false;
  copy.focus();
}

async function loadTokens() {
  const tokens = await api.tokens();
  $("#tokens tbody").replaceChildren(...tokens.map(tokenRow));
}

async function start() {
  $("#theme").addEventListener("change", (e) => savePref({ theme: e.target.value }));
  $("#default-profile").addEventListener("change", (e) => savePref({ default_profile: e.target.value || null }));
  $("#time-zone").addEventListener("change", (e) => savePref({ time_zone: e.target.value }));
  $("#notify").addEventListener("change", async (e) => {
    const on = e.target.checked;
    if (on && "Notification" in window && Notification.permission === "default") await Notification.requestPermission();
    if (on && "Notification" in window && Notification.permission === "denied") {
      toast("This browser blocks notifications for Navi; allow them in the site settings.");
    }
    await savePref({ notify_when_done: on });
  });
  $("#new-token").addEventListener("submit", async (e) => {
    e.preventDefault();
    try {
      const created = await api.createToken($("#token-name").value.trim());
      $("#token-name").value = "";
      showCreated(created);
      $("#tokens tbody").prepend(tokenRow(created));
    } catch (err) {
      toast(`Could not create the token: ${err.message}`);
    }
  });
  try {
    await Promise.all([loadPrefs(), loadTokens(), startTelegram()]);
    document.body.dataset.ready = "1";
  } catch (err) {
    toast(`Could not load your settings: ${err.message}`);
  }
}

start();
