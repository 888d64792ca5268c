// Settings → Models and connections (DESIGN §11): the Ollama URL and OpenAI-compatible servers,
// each with Test (reachable, version, models), the owner's default chat model chosen from the
// servers' lists and the embedding model for Knowledge. GET/PATCH /settings; only staff change them
// (a key is write-only: the page sends it and is shown only "key set").
import { api, csrfToken } from "./api.js";
import { el } from "./cards.js";
import { $, toast } from "./pagekit.js";

let current = null; // GET /settings
let listing = { models: [] }; // GET /models

async function post(path, body) {
  const response = await fetch(path, {
    method: "POST", credentials: "same-origin",
    headers: { "Content-Type": "application/json", Accept: "application/json", "X-CSRFToken": csrfToken() },
    body: JSON.stringify(body),
  });
  const data = await response.json().catch(() => ({}));
  if (!response.ok) throw new Error(data.error || `the test failed with HTTP ${response.status}`);
  return data;
}

function say(text, kind = "") {
  const status = $("#conn-status");
  status.textContent = text;
  status.className = `status ${kind}`;
}

/** "Reachable: Ollama 0.12.0, 3 models (1 only embeds)" or why not. */
function describeTest(result) {
  if (!result.reachable) return `Not reachable: ${result.error}`;
  const embedding = result.models.filter((m) => m.embedding).length;
  const version = result.version ? ` (version ${result.version})` : "";
  const count = `${result.models.length} model${result.models.length === 1 ? "" : "s"}`;
  return `Reachable${version}: ${count}${embedding ? `, ${embedding} only for embeddings` : ""}` +
    (result.models.length ? ` — ${result.models.slice(0, 6).map((m) => m.name).join(", ")}${result.models.length > 6 ? ", …" : ""}` : "");
}

async function runTest(body, where) {
  where.textContent = "Testing…";
  where.className = "status";
  try {
    const result = await post("/settings/connections/test", body);
    where.textContent = describeTest(result);
    where.className = `status ${result.reachable ? "status-ok" : "status-failed"}`;
  } catch (err) {
    where.textContent = `Could not test: ${err.message}`;
    where.className = "status status-failed";
  }
}

async function save(changes, what) {
  try {
    current = await api.saveSettings(changes);
    say(`Saved ${what}.`, "status-ok");
    await load(false);
    return true;
  } catch (err) {
    toast(`Could not save ${what}: ${err.message}`);
    return false;
  }
}

function serverRow(server, canChange) {
  const li = el("li", "host conn-server");
  li.append(el("span", "mono", server.name), el("span", "mono conn-url", server.base_url),
    el("span", "hint", server.has_key ? "key set (hidden)" : "no key"));
  const result = el("span", "status");
  result.setAttribute("role", "status");
  if (canChange) {
    const test = el("button", "", "Test");
    test.type = "button";
    test.setAttribute("aria-label", `Test ${server.name}`);
    test.addEventListener("click", () => runTest({ kind: "openai", name: server.name, base_url: server.base_url }, result));
    const remove = el("button", "danger-outline", "Remove");
    remove.type = "button";
    remove.setAttribute("aria-label", `Remove ${server.name}`);
    remove.addEventListener("click", async () => {
      const rest = current.connections.openai.filter((s) => s.name !== server.name).map(({ name, base_url }) => ({ name, base_url }));
      await save({ connections: { openai: rest } }, `without ${server.name}`);
    });
    li.append(test, remove);
  }
  li.append(result);
  return li;
}

function option(label, value, { disabled = false } = {}) {
  const o = new Option(label, value);
  o.disabled = disabled;
  return o;
}

const same = (a, b) => a.replace(/:latest$/, "") === b.replace(/:latest$/, "");

/** The default chat model: every server's chat models (embedding-only ones shown, disabled). */
function drawDefault() {
  const select = $("#conn-default");
  const groups = new Map();
  for (const m of listing.models) {
    if (!groups.has(m.backend)) groups.set(m.backend, []);
    groups.get(m.backend).push(m);
  }
  const wanted = current.default_model;
  const nodes = [];
  let found = false;
  for (const [backend, models] of groups) {
    const group = document.createElement("optgroup");
    group.label = backend === "ollama" ? "Ollama" : backend;
    for (const m of models) {
      const value = `${backend}\n${m.name}`;
      if (backend === current.default_backend && same(m.name, wanted)) found = true;
      group.append(option(m.embedding ? `${m.name} — only for embeddings, cannot chat` : m.name, value, { disabled: !!m.embedding }));
    }
    nodes.push(group);
  }
  if (!found) nodes.unshift(option(`${wanted} — not on the server`, `${current.default_backend}\n${wanted}`, { disabled: true }));
  select.replaceChildren(...nodes);
  select.value = `${current.default_backend}\n${found ? (listing.models.find((m) => m.backend === current.default_backend && same(m.name, wanted)) || {}).name : wanted}`;
  const missing = $("#conn-default-missing");
  missing.hidden = found;
  missing.textContent = found ? "" : listing.stand_in
    ? `“${wanted}” is not on the server, so Navi uses “${listing.stand_in}” until you choose one here or pull it.`
    : `“${wanted}” is not on the server and it has no chat model yet: pull one from the chat's model menu.`;
}

function drawEmbedding() {
  const select = $("#conn-embedding");
  const models = listing.models.filter((m) => m.backend === "ollama");
  const nodes = models.map((m) => option(m.embedding ? `${m.name} (embedding)` : m.name, m.name));
  if (!models.some((m) => same(m.name, current.embedding_model))) {
    nodes.unshift(option(`${current.embedding_model} — not on the server`, current.embedding_model));
  }
  select.replaceChildren(...nodes);
  const have = models.find((m) => same(m.name, current.embedding_model));
  select.value = have ? have.name : current.embedding_model;
}

async function load(fetchSettings = true) {
  if (fetchSettings) current = await api.settings();
  listing = await api.models().catch(() => ({ models: [] }));
  const conn = current.connections;
  const canChange = !!conn.can_change;
  for (const id of ["#conn-ollama-form", "#conn-add", "#conn-models-form"]) $(id).hidden = !canChange;
  $("#conn-readonly").hidden = canChange;
  $("#conn-readonly").textContent = canChange ? "" :
    `Ollama at ${conn.ollama_url}; default chat model ${current.default_model}; embedding model ${current.embedding_model}. ` +
    "Only the owner (a staff account) changes these.";
  $("#conn-ollama-url").value = conn.ollama_url;
  $("#conn-servers").replaceChildren(...conn.openai.map((s) => serverRow(s, canChange)));
  $("#conn-servers-empty").hidden = conn.openai.length > 0;
  if (canChange) {
    drawDefault();
    drawEmbedding();
  }
}

function start() {
  $("#conn-ollama-form").addEventListener("submit", async (e) => {
    e.preventDefault();
    await save({ connections: { ollama_url: $("#conn-ollama-url").value.trim() } }, "the Ollama URL");
  });
  $("#conn-ollama-test").addEventListener("click", () =>
    runTest({ kind: "ollama", url: $("#conn-ollama-url").value.trim() }, $("#conn-ollama-result")));
  $("#conn-add").addEventListener("submit", async (e) => {
    e.preventDefault();
    const entry = { name: $("#conn-name").value.trim(), base_url: $("#conn-base").value.trim() };
    if ($("#conn-key").value) entry.key = $("#conn-key").value;
    const keep = current.connections.openai.map(({ name, base_url }) => ({ name, base_url }));
    if (await save({ connections: { openai: [...keep.filter((s) => s.name !== entry.name), entry] } }, entry.name)) {
      $("#conn-add").reset();
    }
  });
  $("#conn-add-test").addEventListener("click", () => {
    const body = { kind: "openai", name: $("#conn-name").value.trim() || "openai", base_url: $("#conn-base").value.trim() };
    body.key = $("#conn-key").value;
    runTest(body, $("#conn-add-result"));
  });
  $("#conn-default").addEventListener("change", async (e) => {
    const [backend, model] = e.target.value.split("\n");
    await save({ default_model: model, default_backend: backend }, `the default model (${model})`);
  });
  $("#conn-embedding").addEventListener("change", async (e) => {
    await save({ embedding_model: e.target.value }, `the embedding model (${e.target.value})`);
  });
  load().catch((err) => toast(`Could not load the connections: ${err.message}`));
}

start();
