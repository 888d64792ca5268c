// State and routing of the chat page: the session id lives in the URL hash (reload keeps you
// there); with no hash the most recent session opens. Wires the sidebar, the conversation
// view, the composer and the session's WebSocket together.
import { api } from "./api.js";
import { ChatView } from "./chat.js";
import { Composer } from "./composer.js";
import { McpComposer } from "./mcp-chat.js";
import { closeMenusOn } from "./menus.js";
import { toast } from "./pagekit.js";
import { ModelPicker } from "./models.js";
import { Sidebar } from "./sidebar.js";
import { SessionSocket } from "./ws.js";
import { applyTheme } from "./theme.js";
import { Voice, voiceMark } from "./voice.js";
import { welcome } from "./welcome.js";

const $ = (sel) => document.querySelector(sel);
const state = {
  sessionId: null, socket: null, ready: false, buffer: [], maxContext: 0, frames: [],
  session: null, profiles: [], prefs: { notify_when_done: false },
  unsent: null, // a message sent while the chat's history was still loading: sent once it is drawn
};


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
    : status === "closed" ? "This session is not available; pick another one or start a new chat."
    : status === "paused" ? detail : "";
}

/** The chat header: title, the chat's profile and model (switchable), export links. */
function showSession(session) {
  state.session = session;
  $("#session-title").textContent = session.title || "New chat";
  document.title = `${session.title || "New chat"} — Navi`;
  $("#session-model").textContent = session.profile_name || "";
  const select = $("#session-profile");
  select.value = session.profile_id;
  for (const format of ["md", "json"]) $(`#export-${format}`).href = `/sessions/${session.id}/export?format=${format}`;
}

function setTitle(title) {
  if (!state.session) return;
  state.session.title = title;
  showSession(state.session);
  const item = document.querySelector(`#session-list li[data-id="${state.sessionId}"] .session-title`);
  if (item) {
    item.textContent = title || "New chat";
    item.title = title || "New chat";
  }
  const known = sidebar.sessions.find((s) => s.id === state.sessionId);
  if (known) known.title = title;
}

function notifyDone(frame) {
  if (!state.prefs.notify_when_done || !document.hidden || !("Notification" in window) || Notification.permission !== "granted") return;
  try {
    const title = state.session?.title || "Navi";
    const body = frame.type === "stream_end" ? (frame.content || "The answer is ready.").slice(0, 140)
      : frame.type === "stream_stopped" ? "Stopped." : `Error: ${frame.message || "the run failed"}`;
    const note = new Notification(title, { body, tag: `navi-run-${frame.run_id}` });
    note.onclick = () => {
      window.focus();
      note.close();
    };
  } catch {
    // Notifications only from a service worker in this browser: nothing to do.
  }
}

function send(frame) {
  if (!state.socket) return false;
  state.socket.send(frame);
  return true;
}

const chat = new ChatView($("#scroller"), {
  jumpButton: $("#jump"),
  onRunState: (running) => {
    composer.setRunning(running);
    chat.list.classList.toggle("running", running);
  },
  onRefused: () => {
    if (state.lastSent) composer.restore(state.lastSent);
    state.lastSent = null;
  },
  onEdit: (messageId, content) => send({ type: "edit", message_id: messageId, content }),
  onRegenerate: () => send({ type: "regenerate" }),
  onSelectVersion(messageId, n, group, which) {
    const id = state.sessionId;
    api.selectVersion(id, messageId, n).then((session) => {
      if (state.sessionId !== id) return;
      chat.showVersion(session.messages, session.has_more, group, which);
    }).catch((err) => toast(err.message));
  },
  onTitle: setTitle,
  planMayCome: (message) => {
    // The server's rule (agent.turn.planning.should_plan): "auto" plans only longer or multi-part requests.
    const profile = state.profiles.find((p) => p.id === state.session?.profile_id);
    const mode = profile ? profile.planning || (profile.planning_enabled ? "auto" : "never") : "never";
    if (mode !== "auto") return mode === "always";
    const text = message || "";
    return text.split(/\s+/).filter(Boolean).length > 25 || (text.match(/\?/g) || []).length > 1
      || /\b(and then|after that|afterwards|then|finally|first|second|also|step)\b|\n\s*(\d+[.)]|[-*•])\s/i.test(text);
  },
  onContext: setContext,
  onApproval(approvalId, decision, remember) {
    if (!state.socket) return false;
    state.socket.send({ type: "approval", approval_id: approvalId, decision, ...(remember ? { remember } : {}) });
    return true;
  },
  onToast: toast,
  decorateAnswer: (turn, bar) => voice.decorate(turn, bar),
  markVoice: voiceMark,
  loadOlder: (before) => {
    const id = state.sessionId;
    return api.olderMessages(id, before).then((page) => (state.sessionId === id ? page : null));
  },
  onRunEnd: (run, frame) => {
    notifyDone(frame);
    const id = state.sessionId;
    // New rows got ids (Edit needs them); the title may have changed.
    api.session(id).then((session) => {
      if (state.sessionId !== id) return;
      showSession(session);
      if (!chat.run || chat.run.done) chat.assignIds(session.messages, session.has_more);
      else chat.idsSettled();
    }).catch(() => chat.idsSettled());
    sidebar.refresh().then(() => sidebar.select(state.sessionId)).catch(() => {});
  },
});

const composer = new Composer($("#composer"), {
  getSession: () => state.sessionId,
  onSend(message) {
    if (!state.socket || state.unsent) return false;
    composer.setRunning(true);
    // Drawing the history replaces the list: a message typed before it is drawn waits for it,
    // or its bubble would be wiped (and the run's replay would not bring it back).
    if (state.ready) sendMessage(message);
    else state.unsent = { sessionId: state.sessionId, ...message };
    return true;
  },
  onStop: stopRun,
  onError: toast,
});
new McpComposer($("#composer"), composer, { onError: toast });
const voice = new Voice($("#composer"), composer, { getSession: () => state.sessionId, onError: toast,
  onInfo: (text) => toast(text, "info") });

/** Scroll to the search result's message and highlight its words (older pages are fetched). */
function revealMatch() {
  const { messageId, query } = state.reveal;
  state.reveal = null;
  chat.reveal(messageId, query).then((found) => {
    if (!found) toast("The matching message is no longer in this chat's history.", "info");
  });
}

/** An empty chat shows what Navi can do; an example is sent like a typed message. */
function showWelcome(empty) {
  $("#welcome")?.remove();
  if (!empty) return;
  $("#scroller").prepend(welcome((text) => {
    $("#input").value = text;
    $("#composer").requestSubmit();
  }));
}

/** An empty chat's welcome is read from its top; a chat with messages stays at its end. */
function keepPlace() {
  if ($("#welcome")) $("#scroller").scrollTop = 0;
  else if (chat.pinned) chat.scrollToBottom();
}

function sendMessage(message) {
  const { content, images, files, resources = [] } = message;
  showWelcome(false);
  chat.addUserMessage(content, images, files, resources.map((r) => ({ server: r.server, name: r.uri })));
  state.lastSent = message; // given back to the box if the server refuses it
  const frame = { type: "message", content, images, files };
  if (resources.length) frame.mcp_resources = resources.map((r) => ({ server_id: r.server_id, uri: r.uri }));
  state.socket.send(frame);
}

function stopRun() {
  if (!state.sessionId || !composer.running) return;
  chat.stopping();
  composer.setStopping(true);
  api.stop(state.sessionId).catch((err) => toast(`Stop failed: ${err.message}`));
}

const models = new ModelPicker($("#chat-model"), $("#model-notice"), {
  onError: toast,
  onChanged: (saved) => {
    if (state.session?.id === saved.id) state.session.model = saved.model;
  },
});

const sidebar = new Sidebar($("#sidebar"), {
  onOpen: (id, match) => {
    setMenu(false);
    state.reveal = match ? { sessionId: id, ...match } : null;
    if (match && id === state.sessionId && state.ready) revealMatch(); // already open: no hash change
  },
  onImported: (created) => {
    setMenu(false); // opened as a picked chat is
    location.hash = created.id;
  },
  onRenamed: (id, title) => {
    if (id === state.sessionId) setTitle(title);
  },
  onNew: (profileId) => newSession(profileId),
  onDeleted: (id) => {
    if (id === state.sessionId) openMostRecent();
  },
  onError: toast,
});

function receive(frame) {
  state.frames.push(frame);
  if (state.frames.length > 200) state.frames.shift();
  if (frame.type === "live_paused" || frame.type === "live_resumed") {
    // The server lost its message bus (Redis) and got it back: the run went on meanwhile, and
    // what it wrote arrives as frames once the bus is back.
    setConnection(frame.type === "live_paused" ? "paused" : "open", frame.message);
    return;
  }
  if (frame.type === "resume_unavailable") {
    // The run we were following ended while we were away and is no longer replayable:
    // the saved history has its final state.
    if (state.sessionId) openSession(state.sessionId);
    return;
  }
  if (frame.type === "stream_start") showWelcome(false); // written from elsewhere (another tab, a routine)
  if (!state.ready) state.buffer.push(frame);
  else {
    chat.frame(frame);
    voice.frame(frame, chat.run);
  }
}

async function openSession(id) {
  if (state.socket) state.socket.close();
  if (id !== state.sessionId) composer.dropQueue(); // queued for the chat being left
  if (state.unsent && state.unsent.sessionId !== id) {
    // Sent to a chat that was left before it finished loading: give the text back, don't lose it.
    const input = $("#input");
    if (!input.value) input.value = state.unsent.content;
    state.unsent = null;
  }
  state.sessionId = id;
  state.ready = false;
  document.body.dataset.ready = "0";
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
    toast(err.status === 404 ? "That session does not exist any more; opening your latest one." : err.message, err.status === 404 ? "info" : "error");
    if (err.status === 404) openMostRecent();
    return;
  }
  if (state.sessionId !== id) return;
  showSession(session);
  // The model notice above the chat may come or go: a chat opened at its end stays there.
  const modelChosen = models.show(session).then(() => state.sessionId === id && keepPlace());
  setContext(session.context_token_count, session.context_window || 0);
  chat.loadHistory(session.messages, session.has_more);
  showWelcome(!session.messages.length && !session.has_more);
  keepPlace();
  // A message typed at once waits (as state.unsent) for the installed model the first run picks.
  await modelChosen.catch(() => {});
  if (state.sessionId !== id) return;
  state.ready = true;
  for (const frame of state.buffer.splice(0)) chat.frame(frame);
  const unsent = state.unsent;
  state.unsent = null;
  if (unsent) sendMessage(unsent);
  document.body.dataset.ready = "1";
  if (state.reveal?.sessionId === id) revealMatch();
}

async function newSession(profileId) {
  try {
    const created = await api.createSession(profileId || undefined);
    await sidebar.refresh();
    // The server reuses your newest chat while it is still empty (maybe this one: then only its
    // profile may have changed; reopening it would race a message typed right away).
    if (created.session_id === state.sessionId) {
      api.session(created.session_id).then((session) => state.sessionId === session.id && showSession(session)).catch(() => {});
    } else {
      location.hash = created.session_id;
    }
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

function setMenu(open) {
  document.body.classList.toggle("sidebar-open", open);
  $("#menu").setAttribute("aria-expanded", String(open));
  if (open) $("#sidebar").querySelector("button, input, a")?.focus();
}

async function switchProfile(profileId) {
  const id = state.sessionId;
  try {
    const session = await api.setProfile(id, profileId);
    if (state.sessionId !== id) return;
    showSession({ ...state.session, ...session });
    models.show(state.session);
    sidebar.refresh().catch(() => {});
  } catch (err) {
    toast(`Could not switch the profile: ${err.message}`);
    if (state.session) showSession(state.session);
  }
}

async function loadPrefs() {
  try {
    state.prefs = await api.settings();
    applyTheme(state.prefs.theme);
  } catch {
    // Preferences are a nicety: the chat works without them.
  }
}

async function start() {
  $("#menu").addEventListener("click", () => setMenu(!document.body.classList.contains("sidebar-open")));
  $("#backdrop").addEventListener("click", () => setMenu(false));
  $("#session-profile").addEventListener("change", (e) => switchProfile(e.target.value));
  $("#header-new-chat").addEventListener("click", () => newSession(sidebar.profileSelect.value));
  closeMenusOn();
  $("#skip-to-input").addEventListener("click", (e) => {
    e.preventDefault(); // the hash names the open chat, not a place on the page
    $("#input").focus();
  });
  document.addEventListener("keydown", (e) => {
    if (e.key !== "Escape" || e.defaultPrevented) return;
    // Esc in a field (renaming a chat, searching, a select) belongs to that field.
    const t = e.target;
    if (t !== $("#input") && (["INPUT", "TEXTAREA", "SELECT"].includes(t.tagName) || t.isContentEditable)) return;
    if (document.body.classList.contains("sidebar-open")) {
      setMenu(false);
      $("#menu").focus();
    } else if (composer.running) {
      e.preventDefault();
      stopRun();
    }
  });
  $("#debug-link")?.addEventListener("click", (e) => { // staff only
    e.currentTarget.href = `/debug#${state.sessionId || ""}`;
  });
  try {
    const [profiles] = await Promise.all([sidebar.loadProfiles(), sidebar.refresh(), loadPrefs(), models.load()]);
    state.profiles = profiles;
    if (state.prefs.default_profile && profiles.some((p) => p.id === state.prefs.default_profile)) {
      sidebar.profileSelect.value = state.prefs.default_profile;
    }
    $("#session-profile").replaceChildren(...sidebar.profileSelect.cloneNode(true).children);
  } catch (err) {
    toast(`Could not load your sessions: ${err.message}`);
    return;
  }
  window.addEventListener("hashchange", route);
  route();
}

start();
