// The Knowledge page: upload documents (several at once, drag and drop), watch each one wait and
// index ("Queued (3rd in line)", "Indexing 42 %" with a progress bar, "Failed: why"), delete,
// and try a search (GET/POST /knowledge, GET/DELETE /knowledge/<id>, GET /knowledge/search).
// Statuses are updated in place (keyboard focus stays put) and each change is said once in a
// polite live region.
import { ApiError, csrfToken } from "./api.js";
import { el } from "./cards.js";
import { $, toast, when } from "./pagekit.js";
import { documentLink, resultParts } from "./knowledge-marks.js";

const POLL_MS = 1000;
let polling = null;

async function call(method, path) {
  const response = await fetch(path, { method, credentials: "same-origin", headers: { Accept: "application/json", "X-CSRFToken": csrfToken() } });
  if (response.status === 401) {
    window.location.assign(`/login/?next=${encodeURIComponent(location.pathname)}`);
    throw new ApiError("your login expired; log in again", 401);
  }
  const data = await response.json().catch(() => ({}));
  if (!response.ok) throw new ApiError(data.error || `${method} ${path} failed with HTTP ${response.status}`, response.status);
  return data;
}

function describe(location) {
  if (location.section) {
    const where = location.line && !location.page ? `${location.section} (line ${location.line})` : location.section;
    return location.page ? `page ${location.page}, ${where}` : where;
  }
  const parts = [];
  if (location.page) parts.push(`page ${location.page}`);
  if (location.heading) parts.push(`“${location.heading}”`);
  if (location.line && !location.page) parts.push(`line ${location.line}`);
  return parts.join(", ");
}

/** 1 → "1st", 2 → "2nd", 3 → "3rd", 11 → "11th" … */
export function ordinal(n) {
  const tens = n % 100;
  const suffix = tens >= 11 && tens <= 13 ? "th" : { 1: "st", 2: "nd", 3: "rd" }[n % 10] || "th";
  return `${n}${suffix}`;
}

export function statusText(doc) {
  if (doc.status === "ready") return `Ready — ${doc.chunks} passage${doc.chunks === 1 ? "" : "s"}`;
  if (doc.status === "failed") return `Failed: ${doc.error || "unknown reason"}`;
  if (doc.status === "queued") return doc.queue_position ? `Queued (${ordinal(doc.queue_position)} in line)` : "Queued";
  return `Indexing ${doc.progress} %`;
}

const busy = (doc) => doc.status === "queued" || doc.status === "indexing";

function documentItem(doc) {
  const li = el("li", "document");
  li.dataset.id = doc.id;
  li.id = `document-${doc.id}`; // an answer's source chip links here
  const head = el("div", "document-head");
  head.append(documentLink(doc), el("span", "hint", ` added ${when(doc.created_at)}`));
  const status = el("p", "document-status");
  status.id = `document-status-${doc.id}`;
  const bar = el("progress");
  bar.max = 100;
  bar.setAttribute("aria-label", `Indexing ${doc.name}`);
  bar.setAttribute("aria-describedby", status.id);
  const remove = el("button", "danger-outline", "Delete");
  remove.type = "button";
  remove.setAttribute("aria-label", `Delete ${doc.name}`);
  remove.addEventListener("click", async () => {
    if (!window.confirm(`Delete "${doc.name}" and its passages?`)) return;
    try {
      await call("DELETE", `/knowledge/${doc.id}`);
      await refresh();
      $("#files").focus(); // the button is gone: keep the keyboard on the page
    } catch (err) {
      toast(`Could not delete: ${err.message}`);
    }
  });
  li.append(head, status, bar, remove);
  return li;
}

/** The item's status shown in place (focus stays where it is); a change of state is announced once. */
function showStatus(li, doc) {
  const before = li.dataset.status;
  li.className = `document ${doc.status}${li.classList.contains("linked") ? " linked" : ""}`;
  li.dataset.status = doc.status;
  li.querySelector(".document-status").textContent = statusText(doc);
  const bar = li.querySelector("progress");
  bar.hidden = doc.status !== "indexing";
  bar.value = doc.progress;
  bar.setAttribute("aria-valuetext", `${doc.progress} %`);
  if (before && before !== doc.status && (doc.status === "ready" || doc.status === "failed" || doc.status === "indexing")) {
    $("#doc-live").textContent = `${doc.name}: ${statusText(doc)}`;
  }
}

async function refresh() {
  let data;
  try {
    data = await call("GET", "/knowledge");
  } catch (err) {
    toast(`Could not load your documents: ${err.message}`);
    return;
  }
  const list = $("#documents");
  const known = new Map([...list.children].map((li) => [li.dataset.id, li]));
  const items = data.documents.map((doc) => {
    const li = known.get(doc.id) || documentItem(doc);
    showStatus(li, doc);
    return li;
  });
  items.forEach((li, i) => {
    if (list.children[i] !== li) list.insertBefore(li, list.children[i] || null);
  });
  for (const li of [...list.children].slice(items.length)) li.remove();
  $("#docs-empty").hidden = data.documents.length > 0;
  const notice = $("#notice");
  if (data.notice) {
    notice.textContent = `Search uses words only until this is fixed: ${data.notice}`;
    notice.hidden = false;
  } else if (!notice.textContent) {
    notice.hidden = true;
  }
  const jobs = $("#jobs-notice");
  jobs.textContent = data.jobs && data.jobs !== "ok" ? `Documents wait: ${data.jobs}` : "";
  jobs.hidden = !jobs.textContent;
  showLinked();
  const waiting = data.documents.some(busy);
  if (waiting && !polling) polling = setInterval(refresh, POLL_MS);
  if (!waiting && polling) {
    clearInterval(polling);
    polling = null;
  }
}

let linkShown = false;

/** /knowledge/#document-<id> (from a source chip in the chat): that document, marked and focused. */
function showLinked() {
  const target = decodeURIComponent(location.hash.slice(1));
  if (linkShown || !target.startsWith("document-")) return;
  linkShown = true;
  const item = document.getElementById(target);
  if (!item) {
    toast("The document that answer cited is no longer in your Knowledge (it was deleted); upload it again to cite it.");
    return;
  }
  item.classList.add("linked");
  item.tabIndex = -1;
  item.scrollIntoView({ block: "center" });
  item.focus();
}

function upload(file) {
  // XMLHttpRequest, not fetch: it reports the upload's own progress.
  const li = el("li", "upload");
  const bar = el("progress");
  bar.max = 100;
  bar.value = 0;
  bar.setAttribute("aria-label", `Uploading ${file.name}`);
  const label = el("span", "", `${file.name}: uploading…`);
  li.append(label, bar);
  $("#uploads").append(li);
  return new Promise((resolve) => {
    const xhr = new XMLHttpRequest();
    xhr.open("POST", "/knowledge");
    xhr.setRequestHeader("X-CSRFToken", csrfToken());
    xhr.setRequestHeader("Accept", "application/json");
    xhr.upload.addEventListener("progress", (e) => {
      if (e.lengthComputable) bar.value = Math.round((100 * e.loaded) / e.total);
    });
    xhr.addEventListener("load", () => {
      let data = {};
      try {
        data = JSON.parse(xhr.responseText);
      } catch {
        data = {};
      }
      if (xhr.status === 201 || xhr.status === 200) {
        li.remove();
        if (xhr.status === 200) toast(`${file.name} is already in your documents`);
      } else {
        bar.remove();
        label.textContent = `${file.name}: ${data.error || `upload failed with HTTP ${xhr.status}`}`;
        li.classList.add("failed");
      }
      resolve();
    });
    xhr.addEventListener("error", () => {
      bar.remove();
      label.textContent = `${file.name}: cannot reach the Navi server; check it is running, then try again`;
      li.classList.add("failed");
      resolve();
    });
    const form = new FormData();
    form.append("file", file);
    xhr.send(form);
  });
}

async function uploadAll(files) {
  for (const file of files) {
    await upload(file);
    await refresh();
  }
}

function setUpUpload() {
  const input = $("#files");
  const zone = $("#dropzone");
  input.addEventListener("change", () => {
    uploadAll([...input.files]);
    input.value = "";
  });
  for (const type of ["dragenter", "dragover"]) {
    zone.addEventListener(type, (e) => {
      e.preventDefault();
      zone.classList.add("over");
    });
  }
  for (const type of ["dragleave", "drop"]) zone.addEventListener(type, () => zone.classList.remove("over"));
  zone.addEventListener("drop", (e) => {
    e.preventDefault();
    uploadAll([...e.dataTransfer.files]);
  });
}

function setUpSearch() {
  $("#search-form").addEventListener("submit", async (e) => {
    e.preventDefault();
    const q = $("#q").value.trim();
    if (!q) return;
    try {
      const data = await call("GET", `/knowledge/search?q=${encodeURIComponent(q)}&k=5`);
      const items = data.results.map((r) => {
        const li = el("li", "result");
        const where = describe(r.location);
        li.append(...resultParts(r, q, where));
        return li;
      });
      $("#results").replaceChildren(...(items.length ? items : [el("li", "hint", "Nothing in your documents matches.")]));
    } catch (err) {
      toast(`Search failed: ${err.message}`);
    }
  });
}

setUpUpload();
setUpSearch();
refresh();
