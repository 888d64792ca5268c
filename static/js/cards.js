// Small DOM builders for the pieces of a conversation: bubbles, thinking blocks, tool cards,
// plan cards and notices. Text from the model or the user is only ever set as textContent or
// through renderMarkdown (sanitised).
import { api } from "./api.js";
import { renderMarkdown } from "./markdown.js";

export function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined && text !== null) node.textContent = text;
  return node;
}

const SVG = "http://www.w3.org/2000/svg";

/** A small document icon (inline SVG: no font glyph that may be missing). */
export function fileIcon() {
  const svg = document.createElementNS(SVG, "svg");
  svg.setAttribute("viewBox", "0 0 16 16");
  svg.setAttribute("width", "14");
  svg.setAttribute("height", "14");
  svg.setAttribute("aria-hidden", "true");
  svg.setAttribute("class", "file-icon");
  const path = document.createElementNS(SVG, "path");
  path.setAttribute("d", "M4 1.5h5l3.5 3.5v9.5H4z M9 1.5V5h3.5");
  path.setAttribute("fill", "none");
  path.setAttribute("stroke", "currentColor");
  path.setAttribute("stroke-width", "1.3");
  path.setAttribute("stroke-linejoin", "round");
  svg.append(path);
  return svg;
}

/** A chip naming a file, with the file icon. */
export function fileChip(name, className = "chip") {
  const chip = el("span", className);
  chip.append(fileIcon(), el("span", "name", name));
  return chip;
}

/** A chip naming an MCP resource and its server (its text went to the model as untrusted data). */
export function resourceChip(server, name, className = "chip resource") {
  const chip = el("span", className);
  chip.title = `MCP resource ${name} from server ${server} (read as outside data, not instructions)`;
  chip.append(el("span", "resource-tag", "MCP"), el("span", "name", `${server} · ${name}`));
  return chip;
}

/** A small text button (message actions, code copy). */
export function actionButton(text, className, title, onClick) {
  const b = el("button", `action ${className}`, text);
  b.type = "button";
  if (title) b.title = title;
  b.addEventListener("click", onClick);
  return b;
}

const FILES_BLOCK = /\n*\[Uploaded files on disk:\n([\s\S]*?)\]\s*$/;
// An attached MCP resource: agent/web/mcp_attach.py wraps it as untrusted data naming its source.
const RESOURCE_BLOCK =
  /\n*\[UNTRUSTED DATA ([0-9a-f]{8}) from the MCP resource ("(?:[^"\\]|\\.)*") of server ("(?:[^"\\]|\\.)*")\. [\s\S]*?\[END UNTRUSTED DATA \1\]/g;

function parseQuoted(text) {
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}

export function imageSrc(ref) {
  if (typeof ref !== "string" || !ref) return "";
  if (ref.startsWith("data:image/")) return ref;
  if (ref.startsWith("/sessions/")) return ref;
  return `data:image/png;base64,${ref}`;
}

/** A user bubble: plain text (never HTML), attached images and uploaded-file chips. */
export function userBubble(content, images = [], files = [], resources = []) {
  const wrap = el("div", "group user");
  wrap.images = images;
  const bubble = el("div", "bubble user-bubble");
  // Attached MCP resources become chips; an edit keeps them (`attached` goes back on the end).
  resources = [...resources];
  const attached = [];
  let text = (content || "").replace(RESOURCE_BLOCK, (block, marker, uri, server) => {
    resources.push({ server: parseQuoted(server), name: parseQuoted(uri) });
    attached.push(block);
    return "";
  });
  wrap.source = text;
  wrap.attached = attached.join("");
  const match = text.match(FILES_BLOCK);
  if (match) {
    text = text.slice(0, match.index);
    for (const line of match[1].split("\n")) {
      const name = line.replace(/^-\s*/, "").split(" → ")[0];
      if (name) files = [...files, { name }];
    }
  }
  bubble.append(el("div", "text", text));
  if (images.length) {
    const row = el("div", "images");
    for (const ref of images) {
      const img = el("img");
      img.alt = "attached image";
      img.src = imageSrc(ref);
      row.append(img);
    }
    bubble.append(row);
  }
  if (files.length) {
    const row = el("div", "files");
    for (const f of files) row.append(fileChip(f.name));
    bubble.append(row);
  }
  if (resources.length) {
    const row = el("div", "files resources");
    for (const r of resources) row.append(resourceChip(r.server, r.name));
    bubble.append(row);
  }
  wrap.append(bubble);
  return wrap;
}

/** A collapsible reasoning block; open while the model is still thinking. */
export function thinkingBlock(text, open) {
  const details = el("details", "thinking");
  details.open = open;
  const summary = el("summary", "", open ? "Thinking…" : "Thought process");
  const body = el("div", "thinking-body", text || "");
  details.append(summary, body);
  return details;
}

export function closeThinking(details, text) {
  if (text !== undefined) details.querySelector(".thinking-body").textContent = text;
  details.querySelector("summary").textContent = "Thought process";
  details.open = false;
  details.classList.add("done");
}

/** Tool arguments as 2-space JSON (a string that is not JSON stays as it is). */
export function pretty(value) {
  if (typeof value === "string") {
    try {
      return JSON.stringify(JSON.parse(value), null, 2);
    } catch {
      return value;
    }
  }
  return JSON.stringify(value ?? {}, null, 2);
}

/** A tool card: pending until completeToolCard; collapsed by default. */
export function toolCard(name, args) {
  const details = el("details", "tool pending");
  details.dataset.tool = name;
  const summary = el("summary");
  summary.append(el("span", "tool-icon", "⚙"), el("span", "tool-name", name), el("span", "tool-status", "running…"));
  const body = el("div", "tool-body");
  const pre = el("pre", "tool-args", pretty(args));
  pre.tabIndex = 0; // long content scrolls: reachable by keyboard
  body.append(el("div", "label", "Arguments"), pre);
  details.append(summary, body);
  return details;
}

/** The status word of a pending tool card ("awaiting approval", "running…"). */
export function setToolStatus(card, text) {
  card.querySelector(".tool-status").textContent = text;
  card.classList.toggle("awaiting", text === "awaiting approval");
}

/** How far a running tool is: a bar when the total is known, else the count; the server's words. */
export function setToolProgress(card, progress, total, message) {
  let bar = card.querySelector("progress.tool-progress");
  if (!bar) {
    bar = el("progress", "tool-progress");
    bar.setAttribute("aria-label", `${card.dataset.tool} progress`);
    card.querySelector("summary").append(bar);
  }
  if (total) {
    bar.max = total;
    bar.value = Math.min(progress, total);
  } else {
    bar.removeAttribute("value"); // indeterminate
  }
  const done = total ? `${Math.round((100 * Math.min(progress, total)) / total)} %` : `${progress}`;
  setToolStatus(card, message ? `${done} — ${message}` : done);
}

export function completeToolCard(card, result, success) {
  card.querySelector("progress.tool-progress")?.remove();
  card.classList.remove("pending", "awaiting");
  card.classList.add(success ? "ok" : "failed");
  card.querySelector(".tool-status").textContent = success ? "done" : "failed";
  const body = card.querySelector(".tool-body");
  body.querySelector(".tool-result")?.remove();
  body.querySelector(".label.result")?.remove();
  const pre = el("pre", "tool-result", result ?? "");
  pre.tabIndex = 0;
  body.append(el("div", "label result", success ? "Result" : "Error"), pre);
  body.querySelector(".restore-row")?.remove();
  const kept = success && card.dataset.tool === "filesystem" ? KEPT.exec(String(result ?? "")) : null;
  if (kept) body.append(restoreRow(kept[1]));
}

// The filesystem tool's own words after a write, delete or move over a file (tools_app.file_versions).
const KEPT = /^(?:Wrote|Deleted|Moved|Restored) [\s\S]*\[previous version kept: (\d{19}-[0-9a-f]{6})\]$/;

/** One click undoes the call: the file's content from before it is written back. */
function restoreRow(versionId) {
  const row = el("div", "restore-row");
  const status = el("span", "restore-status");
  status.setAttribute("role", "status");
  const button = actionButton("Restore previous version", "restore", "Write back the file as it was before this call", async () => {
    button.disabled = true;
    status.textContent = "restoring…";
    try {
      const done = await api.restoreFileVersion(versionId);
      status.textContent = done.result;
    } catch (err) {
      status.textContent = err.message;
      button.disabled = false;
    }
  });
  row.append(button, status);
  return row;
}

/** Where sub-agent cards go: a nested list inside a spawn_agent card. */
export function subagentList(card) {
  let list = card.querySelector(":scope > .tool-body > .subagent");
  if (!list) {
    list = el("div", "subagent");
    list.append(el("div", "label", "Sub-agent steps"));
    card.querySelector(".tool-body").append(list);
  }
  return list;
}

/** The plan: collapsible (open while it is fresh; history shows it closed). */
export function planCard(text, open = true) {
  const card = el("details", "plan");
  card.open = open;
  card.append(el("summary", "plan-title", "Plan"));
  const body = el("div", "markdown");
  renderMarkdown(body, text);
  card.append(body);
  return card;
}

export function notice(text, kind = "") {
  return el("div", `notice ${kind}`.trim(), text);
}

export function errorBox(message) {
  const box = el("div", "error-box");
  box.setAttribute("role", "alert");
  box.append(el("strong", "", "Error: "), document.createTextNode(message || "something went wrong"));
  return box;
}

export function statusBadge(status) {
  const text = status === "stopped" ? "Stopped." : status === "interrupted"
    ? "Interrupted — the answer was cut off" : status === "partial" ? "Partial answer (still being written or cut off)" : status;
  return el("div", `status-badge ${status}`, text);
}

// A published file's link must stay on this server: "//evil.example/x" and "/\\evil.example" start
// with "/" too, so the URL is resolved and its origin and path checked, not its first character.
export function ownFileUrl(url) {
  if (typeof url !== "string" || !url.startsWith("/")) return null;
  let parsed;
  try {
    parsed = new URL(url, location.origin);
  } catch {
    return null;
  }
  if (parsed.origin !== location.origin || !parsed.pathname.startsWith("/sessions/")) return null;
  return parsed.pathname + parsed.search;
}

export function publishedFile(frame) {
  const box = el("div", "published");
  const url = ownFileUrl(frame.url);
  if ((frame.mime || "").startsWith("image/") && url) {
    const img = el("img");
    img.alt = frame.name;
    img.src = url;
    box.append(img);
  }
  const link = el("a", "file-link");
  link.append(fileIcon(), document.createTextNode(` ${frame.name}`));
  if (url) link.href = url;
  link.target = "_blank";
  link.rel = "noopener";
  box.append(link);
  return box;
}
