// The settings page's "MCP servers" section: each server's state (connecting / connected /
// failed / disabled), its tools, the last error and the tail of a stdio server's stderr;
// add an HTTP server or paste a config, test the connection, enable/disable, delete, allow a
// server or a tool to run without asking (REST /mcp/servers); the states refresh by themselves.
import { ApiError, csrfToken, saved } from "./api.js";
import { el } from "./cards.js";
import { $, toast } from "./pagekit.js";

async function call(method, path, body) {
  const headers = { Accept: "application/json", "X-CSRFToken": csrfToken() };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(path, { method, headers, credentials: "same-origin", body: body === undefined ? undefined : JSON.stringify(body) });
  const data = await response.json().catch(() => ({}));
  if (!response.ok) throw new ApiError(data.error || `${method} ${path} failed with HTTP ${response.status}`, response.status);
  if (method !== "GET") saved();
  return data;
}

const stampOf = (server) => JSON.stringify([server.state, server.last_error, server.tools, server.enabled,
  server.resources, server.prompts, server.pending_paths, server.paths, server.writable_paths]);

function button(label, className, onClick, describedBy) {
  const node = el("button", className, label);
  node.type = "button";
  if (describedBy) node.setAttribute("aria-label", describedBy);
  node.addEventListener("click", onClick);
  return node;
}

function details(summary, body) {
  const box = el("details");
  box.append(el("summary", "", summary), body);
  return box;
}

function serverItem(server) {
  latest.set(server.id, server);
  const li = el("li", "mcp-server");
  li.dataset.id = server.id;
  li.dataset.state = server.state;
  li.dataset.stamp = stampOf(server);
  const head = el("div", "head");
  head.append(el("strong", "", server.name), el("span", `mcp-state ${server.state}`, server.state),
    el("span", "hint", server.global ? "global (from the administrator)" : server.transport));
  li.append(head);
  const where = runsAs(server);
  if (where) li.append(el("p", "mono mcp-where", where));
  if (server.last_error) li.append(el("p", "error", server.last_error));
  // A failed server's reason is in its last stderr lines: shown at once, not behind a click.
  if (server.state === "failed" && server.stderr_tail) {
    const tail = server.stderr_tail.trimEnd().split("\n").slice(-8).join("\n");
    const pre = el("pre", "mcp-stderr", tail);
    pre.setAttribute("aria-label", `Last lines ${server.name} wrote to stderr`);
    li.append(pre);
  }
  if (!server.global && (server.pending_paths || []).length) li.append(pendingFolders(server));
  if (!server.global && ((server.paths || []).length || (server.writable_paths || []).length)) {
    const shown = el("ul", "mcp-folders");
    for (const path of server.paths || []) shown.append(el("li", "", `${path} — read-only`));
    for (const path of server.writable_paths || []) shown.append(el("li", "", `${path} — writable`));
    li.append(details("Folders it sees", shown));
  }
  const offered = (server.tools || []).filter((t) => !t.problem);
  if (server.tools && server.tools.length) {
    const list = el("ul");
    for (const tool of server.tools) {
      const item = el("li");
      const hint = tool.read_only ? " (read-only)" : tool.destructive ? " (destructive)" : "";
      const remote = tool.name.includes("__") ? tool.name.split("__").slice(1).join("__") : tool.name;
      if (!server.global && !tool.problem) item.append(allowSwitch(server, remote));
      item.append(el("code", "", tool.name), document.createTextNode(tool.problem ? ` — not offered: ${tool.problem}` : `${hint} — ${tool.description || ""}`));
      list.append(item);
    }
    li.append(details(`${offered.length} tool(s)`, list));
  }
  if (server.resources && server.resources.length) {
    const list = el("ul");
    for (const r of server.resources) {
      const item = el("li");
      item.append(el("code", "", r.uri), document.createTextNode(` — ${r.name}${r.description ? `: ${r.description}` : ""}`));
      list.append(item);
    }
    li.append(details(`${server.resources.length} resource(s)`, list));
  }
  if (server.prompts && server.prompts.length) {
    const list = el("ul");
    for (const p of server.prompts) {
      const item = el("li");
      const args = (p.arguments || []).map((a) => a.required ? a.name : `${a.name}?`).join(", ");
      item.append(el("code", "", `${p.name}(${args})`), document.createTextNode(p.description ? ` — ${p.description}` : ""));
      list.append(item);
    }
    li.append(details(`${server.prompts.length} prompt(s)`, list));
  }
  if (server.stderr_tail && server.state !== "failed") li.append(details("stderr (last lines)", el("pre", "", server.stderr_tail)));
  const actions = el("div", "actions");
  if (!server.global) actions.append(allowSwitch(server, null));
  const test = button("Test connection", "test", async () => {
    test.disabled = true;
    test.textContent = "Testing…";
    test.setAttribute("aria-label", `Testing connection to ${server.name}`); // the name says what it shows
    try {
      const fresh = serverItem(await call("POST", `/mcp/servers/${server.id}/test`));
      li.replaceWith(fresh);
      fresh.querySelector("button.test")?.focus(); // the keyboard keeps its place
    } catch (err) {
      toast(`Test failed: ${err.message}`);
      test.disabled = false;
      test.textContent = "Test connection";
      test.setAttribute("aria-label", `Test connection to ${server.name}`);
    }
  }, `Test connection to ${server.name}`);
  if (server.enabled) actions.append(test);
  if (!server.global) {
    actions.append(button(server.enabled ? "Disable" : "Enable", "", async () => {
      try {
        li.replaceWith(serverItem(await call("PATCH", `/mcp/servers/${server.id}`, { enabled: !server.enabled })));
      } catch (err) {
        toast(`Could not change ${server.name}: ${err.message}`);
      }
    }, `${server.enabled ? "Disable" : "Enable"} ${server.name}`));
    const edit = button("Edit", "", () => {
      const open = li.querySelector(".mcp-edit");
      if (open) {
        open.remove();
        edit.setAttribute("aria-expanded", "false");
        return;
      }
      edit.setAttribute("aria-expanded", "true");
      li.insertBefore(editForm(server, li), actions);
      li.querySelector(".mcp-edit input, .mcp-edit textarea")?.focus();
    }, `Edit ${server.name}`);
    edit.setAttribute("aria-expanded", "false");
    actions.append(edit);
    actions.append(button("Delete", "danger-outline", async () => {
      if (!window.confirm(`Delete the MCP server "${server.name}"? Its tools are no longer offered.`)) return;
      try {
        await call("DELETE", `/mcp/servers/${server.id}`);
        li.remove();
        $("#mcp-empty").hidden = !!$("#mcp-servers").children.length;
      } catch (err) {
        toast(`Could not delete ${server.name}: ${err.message}`);
      }
    }, `Delete ${server.name}`));
  }
  li.append(actions);
  return li;
}

/** How the server runs: its command line (stdio) or its URL (http); "" for a global one. */
function runsAs(server) {
  if (server.transport === "http") return server.url || "";
  if (!server.command) return "";
  const quote = (a) => (/[\s"']/.test(a) ? JSON.stringify(a) : a);
  return [server.command, ...(server.args || [])].map(quote).join(" ");
}

/** The card's edit form: the URL (http) or the command and its arguments, one per line (stdio). */
function editForm(server, li) {
  const form = el("form", "mcp-edit stack");
  const http = server.transport === "http";
  const first = document.createElement("input");
  first.value = http ? server.url || "" : server.command || "";
  first.required = true;
  first.spellcheck = false;
  first.autocomplete = "off";
  const firstLabel = el("label", "", http ? "URL" : "Command");
  firstLabel.append(first);
  form.append(firstLabel);
  let args = null;
  if (!http) {
    args = document.createElement("textarea");
    args.rows = Math.min(6, Math.max(2, (server.args || []).length + 1));
    args.value = (server.args || []).join("\n");
    args.spellcheck = false;
    const argsLabel = el("label", "", "Arguments, one per line");
    argsLabel.append(args);
    form.append(argsLabel);
  }
  const save = el("button", "primary", "Save");
  save.type = "submit";
  const cancel = button("Cancel", "", () => {
    form.remove();
    li.querySelector('button[aria-expanded="true"]')?.setAttribute("aria-expanded", "false");
  });
  const row = el("div", "inline-buttons");
  row.append(save, cancel);
  form.append(row);
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    const body = http ? { url: first.value.trim() }
      : { command: first.value.trim(), args: args.value.split("\n").map((a) => a.trim()).filter(Boolean) };
    try {
      replaceItem(await call("PATCH", `/mcp/servers/${server.id}`, body));
      toast(`Saved ${server.name}; it connects again.`, "info");
    } catch (err) {
      toast(`Could not save ${server.name}: ${err.message}`);
    }
  });
  return form;
}

// Folders a pasted config's arguments name wait here until the owner shows each one to the
// server ("Show": read-only, or writable when "writable" is ticked); "Leave out" drops it. Nothing on disk
// changes either way (Navi never re-owns a folder; docs/security.md).
function pendingFolders(server) {
  const box = el("fieldset", "mcp-pending");
  box.append(el("legend", "", "Folders its arguments name — not shown to it until you confirm"));
  const list = el("ul");
  for (const path of server.pending_paths) {
    const item = el("li");
    const label = el("label", "allow-switch");
    const writable = document.createElement("input");
    writable.type = "checkbox";
    writable.setAttribute("aria-label", `Let ${server.name} write in ${path}`);
    label.append(writable, document.createTextNode(" writable"));
    const send = async (body) => {
      try {
        replaceItem(await call("PATCH", `/mcp/servers/${server.id}`, body));
      } catch (err) {
        toast(`Could not change ${server.name}: ${err.message}`);
      }
    };
    const now = () => latest.get(server.id) || server;
    item.append(el("code", "", path), label,
      button("Show", "", () => send(writable.checked
        ? { writable_paths: [...(now().writable_paths || []), path] }
        : { paths: [...(now().paths || []), path] }), `Show ${path} to ${server.name}`),
      button("Leave out", "", () => send({ pending_paths: (now().pending_paths || []).filter((p) => p !== path) }),
        `Leave out ${path} from ${server.name}`));
    list.append(item);
  }
  box.append(list);
  return box;
}

// "Allow without asking": the whole server (auto_approve) or one tool (auto_approve_tools).
// Changes are sent one after another, each built on the server's latest answer, so quick
// toggles of several switches all stay (none is lost to an answer that was still on its way).
const latest = new Map(); // server id -> its latest JSON from the API
let saving = Promise.resolve();

function allowSwitch(server, tool) {
  const label = el("label", "allow-switch");
  const box = document.createElement("input");
  box.type = "checkbox";
  const tools = server.auto_approve_tools || [];
  box.checked = tool === null ? !!server.auto_approve : !!server.auto_approve || tools.includes(tool);
  box.disabled = tool !== null && !!server.auto_approve;
  box.dataset.allow = tool === null ? "" : tool;
  box.addEventListener("change", () => {
    const wanted = box.checked;
    saving = saving.then(async () => {
      const now = latest.get(server.id) || server;
      const chosen = now.auto_approve_tools || [];
      const body = tool === null ? { auto_approve: wanted }
        : { auto_approve_tools: wanted ? [...new Set([...chosen, tool])] : chosen.filter((t) => t !== tool) };
      try {
        replaceItem(await call("PATCH", `/mcp/servers/${server.id}`, body));
      } catch (err) {
        box.checked = !wanted;
        toast(`Could not change ${server.name}: ${err.message}`);
      }
    });
  });
  label.append(box, document.createTextNode(tool === null ? " Allow all its tools without asking" : " allow "));
  if (tool !== null) box.setAttribute("aria-label", `Allow ${tool} without asking`); // "allow" alone names no tool
  label.title = tool === null ? `Run every tool of ${server.name} without asking first` : `Run ${tool} without asking first`;
  return label;
}

// A server's item drawn again from an answer; the keyboard keeps its place (the same switch,
// its tool list still open) when it was on one of the item's switches.
function replaceItem(server) {
  const here = document.querySelector(`.mcp-server[data-id="${server.id}"]`);
  const fresh = serverItem(server);
  if (!here) return;
  const active = here.contains(document.activeElement) ? document.activeElement.dataset.allow : undefined;
  here.replaceWith(fresh);
  const again = [...fresh.querySelectorAll("input[data-allow]")].find((b) => b.dataset.allow === active);
  if (again) {
    const list = again.closest("details");
    if (list) list.open = true;
    again.focus();
  }
}

// The state follows the server: refresh what changed every few seconds (never the item in use).
async function refresh() {
  let servers;
  try {
    servers = await call("GET", "/mcp/servers");
  } catch {
    return;
  }
  for (const server of servers) {
    const item = document.querySelector(`.mcp-server[data-id="${server.id}"]`);
    if (!item || item.dataset.stamp === stampOf(server)) continue;
    if (item.contains(document.activeElement)) showState(item, server); // in use: only its state and error
    else item.replaceWith(serverItem(server));
  }
}

// A server's state and last error, changed in place (the item keeps the keyboard's focus).
function showState(item, server) {
  latest.set(server.id, server);
  const badge = item.querySelector(".mcp-state");
  badge.className = `mcp-state ${server.state}`;
  badge.textContent = server.state;
  item.dataset.state = server.state;
  let error = item.querySelector(":scope > p.error");
  if (!server.last_error) {
    error?.remove();
    return;
  }
  if (!error) {
    error = el("p", "error");
    item.querySelector(":scope > .head").after(error);
  }
  error.textContent = server.last_error;
}

async function load() {
  const servers = await call("GET", "/mcp/servers");
  $("#mcp-servers").replaceChildren(...servers.map(serverItem));
  $("#mcp-empty").hidden = servers.length > 0;
}

function start() {
  $("#mcp-add").addEventListener("submit", async (e) => {
    e.preventDefault();
    const token = $("#mcp-token").value.trim();
    const body = { name: $("#mcp-name").value.trim(), transport: "http", url: $("#mcp-url").value.trim() };
    if (token) body.headers = { Authorization: `Bearer ${token}` };
    try {
      const created = await call("POST", "/mcp/servers", body);
      $("#mcp-add").reset();
      $("#mcp-servers").append(serverItem(created));
      $("#mcp-empty").hidden = true;
      // It connects in the background: show the state it reaches.
      const tested = await call("POST", `/mcp/servers/${created.id}/test`);
      const item = document.querySelector(`.mcp-server[data-id="${created.id}"]`);
      if (item) item.replaceWith(serverItem(tested));
    } catch (err) {
      toast(`Could not add the server: ${err.message}`);
    }
  });
  $("#mcp-import").addEventListener("submit", async (e) => {
    e.preventDefault();
    const errors = $("#mcp-import-errors");
    errors.replaceChildren();
    let config;
    try {
      config = JSON.parse($("#mcp-import-text").value);
    } catch (err) {
      errors.append(el("li", "error", `Not valid JSON (${err.message}); paste the whole {"mcpServers": …} object.`));
      return;
    }
    try {
      const result = await call("POST", "/mcp/servers/import", config);
      for (const server of result.servers) $("#mcp-servers").append(serverItem(server));
      $("#mcp-empty").hidden = !!$("#mcp-servers").children.length;
      for (const [name, why] of Object.entries(result.errors)) errors.append(el("li", "error", `${name}: ${why}`));
      if (!Object.keys(result.errors).length) $("#mcp-import").reset();
      const problems = Object.keys(result.errors).length;
      toast(`Imported ${result.servers.length} server(s)${problems ? "; see the problems below" : ""}.`, problems ? "error" : "info");
    } catch (err) {
      errors.append(el("li", "error", err.message));
    }
  });
  setInterval(refresh, 3000);
  load().then(() => { document.body.dataset.mcpReady = "1"; }).catch((err) => toast(`Could not load the MCP servers: ${err.message}`));
}

start();
