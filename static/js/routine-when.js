// A routine's schedule in plain words ("every weekday at 8"): presets, a live preview of the
// next three runs in the routine's zone as one types (GET /routines/preview), and the zone
// guessed from the browser for a new routine.
import { csrfToken } from "./api.js";
import { el } from "./cards.js";
import { $ } from "./pagekit.js";

let timer = null;
let asked = 0; // the newest preview asked for: older answers arriving late are dropped

export function browserZone() {
  try {
    return Intl.DateTimeFormat().resolvedOptions().timeZone || "";
  } catch {
    return "";
  }
}

function inZone(iso, zone) {
  try {
    return new Date(iso).toLocaleString(undefined, { timeZone: zone, weekday: "short", month: "short", day: "numeric",
      hour: "2-digit", minute: "2-digit", timeZoneName: "short" });
  } catch {
    return iso;
  }
}

/** The schedule the words mean and its next runs, or throws Error with the server's advice. */
export async function preview(text, zone) {
  const query = new URLSearchParams({ text });
  if (zone) query.set("time_zone", zone);
  const response = await fetch(`/routines/preview?${query}`, {
    credentials: "same-origin", headers: { Accept: "application/json", "X-CSRFToken": csrfToken() },
  });
  const data = await response.json().catch(() => ({}));
  if (!response.ok) throw new Error(data.error || `the preview failed with HTTP ${response.status}`);
  return data;
}

async function refresh() {
  const box = $("#when-preview");
  const text = $("#r-when").value.trim();
  const mine = ++asked;
  if (!text) {
    box.replaceChildren(el("p", "hint", "Say when, e.g. every weekday at 8."));
    return;
  }
  try {
    const found = await preview(text, $("#r-zone").value.trim());
    if (mine !== asked) return;
    const list = el("ol", "fires");
    list.setAttribute("aria-label", "Next runs");
    for (const run of found.next_runs) list.append(el("li", "", inZone(run, found.time_zone)));
    box.replaceChildren(el("p", "hint", `Understood: ${found.description} (${found.time_zone}). Next runs:`), list);
    box.classList.remove("invalid");
    $("#r-when").removeAttribute("aria-invalid");
  } catch (err) {
    if (mine !== asked) return;
    box.replaceChildren(el("p", "when-error", err.message));
    box.classList.add("invalid");
    $("#r-when").setAttribute("aria-invalid", "true");
  }
}

export function schedulePreview() {
  clearTimeout(timer);
  timer = setTimeout(refresh, 250);
}

/** Wire the field, the presets and the zone guess (a new routine only: an edit keeps its zone). */
export function setUpWords() {
  $("#r-when").addEventListener("input", schedulePreview);
  $("#r-zone").addEventListener("input", schedulePreview);
  for (const button of document.querySelectorAll(".presets button")) {
    button.addEventListener("click", () => {
      $("#r-when").value = button.dataset.when;
      $("#r-when").focus();
      refresh();
    });
  }
  guessZone();
  refresh();
}

export function guessZone() {
  const zone = browserZone();
  if (!zone || $("#r-zone").value) return;
  $("#r-zone").value = zone;
  $("#zone-hint").textContent = `Guessed from this browser (${zone}); change it if the routine should follow another zone.`;
}
