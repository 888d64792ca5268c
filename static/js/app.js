// State and routing of the chat page: the session id lives in the URL hash (reload keeps you
// there); with no hash the most recent session opens. Wires the sidebar, the conversation
// view, the composer and the session's WebSocket together.
import { api } from "./api.js";
import { ChatView } from "./chat.js";
import { Composer } from "./composer.js";
import { Sidebar } from "./sidebar.js";
import { SessionSocket } from "./ws.js";

const $ = (sel) => document.querySelector(sel);
const state = { sessionId: null, socket: null, ready: false, buffer: [], maxContext: 0, frames: [] };

function toast(message) {
  const box = $("#toast");
  const item = document.createElement("div");
  item.className = "toast";
  item.setAttribute("role", "alert");
  item.textContent = message;
  box.append(item);
  setTimeout(() => item.remove(), 8000);
}

function setContext(tokens, max) {
  if (max) state.maxContext = max;
  const meter = $("#context-meter");
  const used = tokens || 0;
  const total = state.maxContext;
  const ratio = total ? Math.min(1, used / total) : 0;
  meter.querySelector(".bar > span").style.width = `${Math.round(ratio * 100)}%`;
  meter.querySelector(".label").textContent = total
    ? `${used.toLocaleString()} / ${total.toLocaleString()} tokens`
    : `${used.toLocaleString()} tokens`;
  meter.classList.toggle("high", ratio > 0.8);
  meter.title = "Context window used by this session";
}

function setConnection(status, detail) {
  const line = $("#connection");
  line.dataset.state = status;
  line.textContent = status === "reconnecting" ? `Connection lost — reconnecting in ${(detail / 1000).toFixed(1)} s…`
    : status === "closed" ? "This session is not available; pick another one or start a new chat." : "";
}

const chat = new ChatView($("#scroller"), {
  onRunState: (running) => composer.setRunning(running),
  onContext: setContext,
  onApproval(approvalId, decision, remember) {
    if (!state.socket) return false;
    state.socket.send({ type: "approval", approval_id: approvalId, decision, ...(remember ? { remember } : {}) });
    return true;
  },
  onToast: toast,
  onRunEnd: () =>
    sidebar.refresh().then((sessions) => {
      sidebar.select(state.sessionId);
      const current = sessions.find((s) => s.id === state.sessionId);
      if (current) $("#session-title").textContent = current.title || "New chat";
    }).catch(() => {}),
});

const composer = new Composer($("#composer"), {
  getSession: () => state.sessionId,
  onSend(content, images, files) {
    if (!state.socket) return false;
    chat.addUserMessage(content, images, files);
    composer.setRunning(true);
    state.socket.send({ type: "message", content, images, files });
    return true;
  },
  onStop: () => {
    if (state.sessionId) api.stop(state.sessionId).catch((err) => toast(`Stop failed: ${err.message}`));
  },
  onError: toast,
});

const sidebar = new Sidebar($("#sidebar"), {
  onOpen: () => document.body.classList.remove("sidebar-open"),
  onNew: (profileId) => newSession(profileId),
  onDeleted: (id) => {
    if (id === state.sessionId) openMostRecent();
  },
  onError: toast,
});

function receive(frame) {
  state.frames.push(frame);
  if (state.frames.length > 200) state.frames.shift();
  if (frame.type === "resume_unavailable") {
    // The run we were following ended while we were away and is no longer replayable:
    // the saved history has its final state.
    if (state.sessionId) openSession(state.sessionId);
    return;
  }
  if (!state.ready) state.buffer.push(frame);
  else chat.frame(frame);
}

async function openSession(id) {
  if (state.socket) state.socket.close();
  state.sessionId = id;
  state.ready = false;
  state.buffer = [];
  state.maxContext = 0;
  composer.setRunning(false);
  sidebar.select(id);
  // Socket first, history second: a run that ends in between is then in the history, and
  // one still going is replayed (its frames wait in the buffer until the history is drawn).
  state.socket = new SessionSocket(id, { onFrame: receive, onState: setConnection });
  window.navi = { socket: state.socket, frames: state.frames };
  let session;
  try {
    session = await api.session(id);
  } catch (err) {
    if (state.sessionId !== id) return;
    state.socket.close();
    state.socket = null;
    toast(err.status === 404 ? "That session does not exist any more; opening your latest one." : err.message);
    if (err.status === 404) openMostRecent();
    return;
  }
  if (state.sessionId !== id) return;
  $("#session-title").textContent = session.title || "New chat";
  setContext(session.context_token_count, 0);
  chat.loadHistory(session.messages);
  state.ready = true;
  for (const frame of state.buffer.splice(0)) chat.frame(frame);
  document.body.dataset.ready = "1";
}

async function newSession(profileId) {
  try {
    const created = await api.createSession(profileId || undefined);
    await sidebar.refresh();
    location.hash = created.session_id;
    document.body.classList.remove("sidebar-open");
    $("#input").focus();
  } catch (err) {
    toast(`Could not start a new chat: ${err.message}`);
  }
}

async function openMostRecent() {
  const sessions = sidebar.sessions.length ? sidebar.sessions : await sidebar.refresh();
  const latest = [...sessions].sort((a, b) => (b.last_active > a.last_active ? 1 : -1))[0];
  if (latest) {
    history.replaceState(null, "", `#${latest.id}`);
    openSession(latest.id);
  } else {
    newSession(sidebar.profileSelect.value);
  }
}

function route() {
  const id = location.hash.slice(1);
  if (id && id !== state.sessionId) openSession(id);
  else if (!id) openMostRecent();
}

async function start() {
  $("#menu").addEventListener("click", () => document.body.classList.toggle("sidebar-open"));
  $("#debug-link").addEventListener("click", (e) => {
    e.currentTarget.href = `/debug#${state.sessionId || ""}`;
  });
  try {
    await Promise.all([sidebar.loadProfiles(), sidebar.refresh()]);
  } catch (err) {
    toast(`Could not load your sessions: ${err.message}`);
    return;
  }
  window.addEventListener("hashchange", route);
  route();
}

start();
