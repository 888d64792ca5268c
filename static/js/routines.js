// The routines page: create, edit, pause/resume, run now, delete; next fire times in each
// routine's zone; the history of runs with links to the chat each one wrote in
// (GET/POST /routines, GET/PATCH/DELETE /routines/<id>, POST /routines/<id>/run, GET /routines/<id>/runs).
import { csrfToken, saved } from "./api.js";
import { el } from "./cards.js";
import { $, toast } from "./pagekit.js";
import { guessZone, preview, setUpWords } from "./routine-when.js";

let editing = null; // the routine being edited, or null for a new one

async function call(method, path, body) {
  const init = { method, credentials: "same-origin", headers: { Accept: "application/json" } };
  if (method !== "GET") init.headers["X-CSRFToken"] = csrfToken();
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const response = await fetch(path, init);
  if (response.status === 401) {
    window.location.assign(`/login/?next=${encodeURIComponent(location.pathname)}`);
    throw new Error("your login expired; log in again");
  }
  const data = await response.json().catch(() => ({}));
  if (!response.ok) throw new Error(data.error || `${method} ${path} failed with HTTP ${response.status}`);
  if (method !== "GET") saved();
  return data;
}

function inZone(iso, zone) {
  try {
    return new Date(iso).toLocaleString(undefined, { timeZone: zone, weekday: "short", year: "numeric", month: "short",
      day: "numeric", hour: "2-digit", minute: "2-digit", timeZoneName: "short" });
  } catch {
    return iso;
  }
}

function describe(schedule, zone) {
  if (schedule.cron) return `cron ${schedule.cron}`;
  if (schedule.every_s) return `every ${schedule.every_s % 60 ? `${schedule.every_s} s` : `${schedule.every_s / 60} min`}`;
  return `once, ${inZone(schedule.at, zone)}`; // in the routine's zone, not the stored UTC
}

/** "2026-12-07T09:00" of `iso` on the wall clock of `zone` (what a datetime-local input shows). */
function wallClock(iso, zone) {
  try {
    const parts = Object.fromEntries(new Intl.DateTimeFormat("en-CA", { timeZone: zone, year: "numeric", month: "2-digit",
      day: "2-digit", hour: "2-digit", minute: "2-digit", hourCycle: "h23" }).formatToParts(new Date(iso)).map((p) => [p.type, p.value]));
    return `${parts.year}-${parts.month}-${parts.day}T${parts.hour}:${parts.minute}`;
  } catch {
    return iso.slice(0, 16);
  }
}

/** The card's schedule line: the words it was made from, else the schedule itself. */
function scheduleLine(r) {
  const words = r.words ? `“${r.words}”` : describe(r.schedule, r.time_zone);
  return r.words && !r.schedule.at ? `${words} (${describe(r.schedule, r.time_zone)}) · ${r.time_zone}` : `${words} · ${r.time_zone}`;
}

function showKind() {
  const kind = $("#r-kind").value;
  $("#w-words").hidden = kind !== "words";
  $("#w-cron").hidden = kind !== "cron";
  $("#w-every").hidden = kind !== "every";
  $("#w-at").hidden = kind !== "at";
}

async function formBody() {
  const kind = $("#r-kind").value;
  const zoneGiven = $("#r-zone").value.trim();
  const schedule = kind === "words" ? (await preview($("#r-when").value.trim(), zoneGiven)).schedule
    : kind === "cron" ? { cron: $("#r-cron").value.trim() }
    : kind === "every" ? { every_s: Math.round(Number($("#r-every").value) * 60) }
      : { at: $("#r-at").value };
  const body = { name: $("#r-name").value.trim(), instruction: $("#r-instruction").value.trim(), schedule,
    enabled: $("#r-enabled").checked, profile_id: $("#r-profile").value || null };
  if (kind === "words") body.words = $("#r-when").value.trim();
  const zone = $("#r-zone").value.trim();
  if (zone) body.time_zone = zone;
  return body;
}

function fillForm(r) {
  editing = r;
  $("#form-title").textContent = r ? `Edit “${r.name}”` : "New routine";
  $("#r-save").textContent = r ? "Save changes" : "Create routine";
  $("#r-cancel").hidden = !r;
  $("#r-name").value = r ? r.name : "";
  $("#r-instruction").value = r ? r.instruction : "";
  $("#r-zone").value = r ? r.time_zone : "";
  $("#r-profile").value = r && r.profile_id ? r.profile_id : "";
  $("#r-enabled").checked = r ? r.enabled : true;
  const s = r ? r.schedule : { cron: "0 8 * * 1-5" };
  $("#r-kind").value = !r || (r.words && !s.at) ? "words" : s.cron ? "cron" : s.every_s ? "every" : "at";
  if (r && r.words && !s.at) $("#r-when").value = r.words;
  if (!r) {
    $("#r-when").value = "every weekday at 8";
    guessZone();
  }
  if (s.cron) $("#r-cron").value = s.cron;
  if (s.every_s) $("#r-every").value = s.every_s / 60;
  if (s.at) $("#r-at").value = wallClock(s.at, r.time_zone);
  showKind();
  if (r) $("#r-name").focus();
}

function runRow(run, zone) {
  const tr = el("tr");
  const chat = el("td");
  if (run.session_id) {
    const link = el("a", "", "open chat");
    link.href = `/#${run.session_id}`;
    chat.append(link);
  }
  const deliveries = el("td");
  for (const d of run.deliveries || []) {
    const cls = d.ok ? "" : d.skipped ? "hint" : "delivery-failed";
    deliveries.append(el("div", cls, d.ok ? `${d.kind}: sent` : `${d.kind}: ${d.error}`));
  }
  tr.append(el("td", "", inZone(run.scheduled_for, zone)), el("td", `status-${run.status}`, run.status),
    el("td", "", run.error || ""), deliveries, chat);
  return tr;
}

async function toggleHistory(r, box, button) {
  if (!box.hidden) {
    box.hidden = true;
    button.setAttribute("aria-expanded", "false");
    return;
  }
  const runs = await call("GET", `/routines/${r.id}/runs`);
  const table = el("table");
  const head = el("tr");
  for (const h of ["Slot", "Status", "Note", "Delivered", "Chat"]) head.append(el("th", "", h));
  table.append(head, ...runs.map((run) => runRow(run, r.time_zone)));
  box.replaceChildren(runs.length ? table : el("p", "hint", "No runs yet."));
  box.hidden = false;
  button.setAttribute("aria-expanded", "true");
}

function action(label, handler, cls = "") {
  const b = el("button", cls, label);
  b.type = "button";
  b.addEventListener("click", async () => {
    try {
      await handler(b);
    } catch (err) {
      toast(err.message);
    }
  });
  return b;
}

// Made by Navi in a chat that had read outside content: say so, link that chat, let the owner
// confirm it (its runs ask before contacting any host until then).
function untrustedNote(r) {
  const note = el("p", "untrusted-note", `⚠ Made by Navi after reading ${r.tainted_by}. Its runs ask before contacting any host until you confirm it. `);
  if (r.source_session_id) {
    const link = el("a", "", "the chat it came from");
    link.href = `/#${r.source_session_id}`;
    note.append(link, " · ");
  }
  note.append(action("Confirm as mine", async () => {
    await call("PATCH", `/routines/${r.id}`, { untrusted: false });
    await load();
  }));
  return note;
}

// Deleting asks first, in a modal dialog (Tab moves between its buttons, Esc cancels); while a
// run is in progress it asks whether to stop that run or let it finish in its chat.
function askDelete(r) {
  const dialog = $("#delete-dialog");
  const live = Boolean(r.last_run && ["running", "waiting_approval"].includes(r.last_run.status));
  $("#delete-text").textContent = live
    ? `“${r.name}” is running now. Stop that run and delete the routine and its history, or delete it and let the run finish in its chat? The chat is kept either way.`
    : `Delete the routine “${r.name}” and its history? Its chat is kept.`;
  $("#delete-stop").hidden = !live;
  $("#delete-keep").textContent = live ? "Delete, let the run finish" : "Delete";
  dialog.returnValue = "";
  return new Promise((resolve) => {
    dialog.addEventListener("close", () => resolve(dialog.returnValue), { once: true });
    dialog.showModal();
    $("#delete-cancel").focus();
  });
}

/** A failed run's reason on the card, and where it is fixed when a model is the cause. */
function failureNote(run) {
  const box = el("div", "error-box run-error");
  box.append(el("p", "", run.error));
  if (/\bmodel\b.*(not available|not found|no model)|cannot reach/i.test(run.error)) {
    const fix = el("a", "", "Pick a model the server has in Settings");
    fix.href = "/settings/#connections";
    box.append(fix);
  }
  return box;
}

function routineItem(r) {
  const li = el("li", `routine${r.enabled ? "" : " paused"}`);
  li.dataset.id = r.id;
  li.id = `routine-${r.id}`; // a routine's chat links here
  li.append(el("h3", "", r.name), el("p", "hint schedule-line", scheduleLine(r)));
  li.append(el("p", "", r.instruction));
  if (r.untrusted) li.append(untrustedNote(r));
  if (r.next_fires.length) {
    const fires = el("ol", "fires");
    fires.setAttribute("aria-label", `Next runs of ${r.name}`);
    for (const f of r.next_fires) fires.append(el("li", "", inZone(f, r.time_zone)));
    li.append(el("div", "hint", "Next runs:"), fires);
  } else {
    li.append(el("p", "hint", r.enabled ? "No further runs." : "Paused."));
  }
  const last = r.last_run;
  const lastLine = el("p", "last-run", last ? "Last run: " : "Not run yet.");
  if (last) lastLine.append(el("span", `status-${last.status}`, last.status), ` (${inZone(last.scheduled_for, r.time_zone)})`);
  li.append(lastLine);
  if (last && last.status === "failed" && last.error) li.append(failureNote(last));
  const history = el("div", "history");
  history.hidden = true;
  const historyButton = action("History", (b) => toggleHistory(r, history, b));
  historyButton.setAttribute("aria-expanded", "false");
  const actions = el("div", "routine-actions");
  actions.append(
    action("Run now", async () => {
      await call("POST", `/routines/${r.id}/run`);
      toast(`“${r.name}” is running; its chat and history update when it finishes.`, "info");
      setTimeout(load, 1500);
    }, "primary"),
    action(r.enabled ? "Pause" : "Resume", async () => {
      await call("PATCH", `/routines/${r.id}`, { enabled: !r.enabled });
      await load();
    }),
    action("Edit", async () => fillForm(r)),
    historyButton,
    action("Delete", async () => {
      const choice = await askDelete(await call("GET", `/routines/${r.id}`));
      if (choice !== "stop" && choice !== "keep") return;
      const done = await call("DELETE", `/routines/${r.id}${choice === "stop" ? "?stop=1" : "?stop=0"}`);
      if (done.note) toast(done.note);
      else if (done.runs_stopped) toast(`“${r.name}” is deleted and its run was stopped; its chat keeps what it wrote.`);
      await load();
    }, "danger-outline"),
  );
  li.append(actions, history);
  return li;
}

async function load() {
  const { routines } = await call("GET", "/routines");
  const open = [...document.querySelectorAll(".routine .history:not([hidden])")].map((h) => h.closest(".routine").dataset.id);
  $("#routines").replaceChildren(...routines.map(routineItem));
  $("#routines-empty").hidden = routines.length > 0;
  for (const id of open) $(`.routine[data-id="${id}"] .routine-actions button[aria-expanded]`)?.click();
  showLinked();
}

/** Opened from a routine's chat (/routines/#routine-<id>): that routine, in view and marked. */
function showLinked() {
  const target = location.hash.startsWith("#routine-") && document.getElementById(location.hash.slice(1));
  if (!target) return;
  target.classList.add("linked");
  target.scrollIntoView({ block: "center" });
}

async function start() {
  $("#r-kind").addEventListener("change", showKind);
  $("#r-cancel").addEventListener("click", () => fillForm(null));
  setUpWords();
  showKind();
  $("#routine-form").addEventListener("submit", async (e) => {
    e.preventDefault();
    try {
      if (editing) await call("PATCH", `/routines/${editing.id}`, await formBody());
      else await call("POST", "/routines", await formBody());
      fillForm(null);
      await load();
    } catch (err) {
      toast(err.message);
    }
  });
  if (Intl.supportedValuesOf) {
    $("#zones").replaceChildren(...Intl.supportedValuesOf("timeZone").map((z) => { const o = el("option"); o.value = z; return o; }));
  }
  try {
    const { profiles } = await call("GET", "/agents/profiles");
    for (const p of profiles) {
      const o = el("option", "", p.name);
      o.value = p.id;
      $("#r-profile").append(o);
    }
    await load();
  } catch (err) {
    toast(`Could not load routines: ${err.message}`);
  }
}

start();
