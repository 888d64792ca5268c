// The owner's debug page: the session's LLM context, the last frames on its socket, and the
// profile and tool lists. Everything is inserted as text.
import { api } from "./api.js";
import { el } from "./cards.js";
import { SessionSocket } from "./ws.js";

const $ = (sel) => document.querySelector(sel);
const frames = [];
let socket = null;

function row(cells) {
  const tr = el("tr");
  for (const cell of cells) tr.append(el("td", "", cell));
  return tr;
}

function showFrames() {
  $("#frames").textContent = frames.length ? frames.map((f) => JSON.stringify(f)).join("\n") : "No frames yet.";
}

async function showSession(id) {
  if (socket) socket.close();
  frames.length = 0;
  showFrames();
  $("#back").href = `/#${id}`;
  try {
    const ctx = await api.context(id);
    $("#session-info").textContent = `${id} · profile ${ctx.profile_id} · ${ctx.context_token_count} context tokens · ${ctx.messages.length} messages in context`;
    $("#context tbody").replaceChildren(
      ...ctx.messages.map((m) => {
        const extra = m.tool_calls && m.tool_calls.length ? `\n[tool calls] ${JSON.stringify(m.tool_calls)}` : "";
        return row([String(m.seq), m.role + (m.is_summary ? " (summary)" : ""), m.name || "", (m.content || "") + extra]);
      }),
    );
  } catch (err) {
    $("#session-info").textContent = `Could not load the context: ${err.message}`;
  }
  showLLMCalls(id);
  socket = new SessionSocket(id, {
    onFrame(frame) {
      frames.push(frame);
      if (frames.length > 100) frames.shift();
      showFrames();
    },
  });
}

async function getJSON(url) {
  const response = await fetch(url, { credentials: "same-origin" });
  if (!response.ok) throw new Error(`${url}: HTTP ${response.status}`);
  return response.json();
}

async function showLLMCalls(id) {
  try {
    const data = await getJSON(`/agents/llm_calls/${encodeURIComponent(id)}`);
    $("#llm-calls tbody").replaceChildren(
      ...data.runs.map((run, i) => {
        const purposes = run.calls.map((c) => `${c.purpose}${c.outcome === "ok" ? "" : ` (${c.outcome})`}`).join(", ");
        const tokensIn = run.calls.reduce((n, c) => n + c.prompt_tokens, 0);
        const tokensOut = run.calls.reduce((n, c) => n + c.completion_tokens, 0);
        const ms = run.calls.reduce((n, c) => n + c.duration_ms, 0);
        return row([`#${i + 1} ${run.run_id ? run.run_id.slice(0, 8) : "(background)"}`, String(run.calls.length), purposes, `${tokensIn} / ${tokensOut}`, `${(ms / 1000).toFixed(1)} s`]);
      }),
    );
  } catch (err) {
    $("#llm-calls tbody").replaceChildren(row([`Could not load the LLM calls: ${err.message}`]));
  }
}

async function showModels(profiles) {
  $("#prompt-sizes tbody").replaceChildren(
    ...profiles.map((p) => {
      const size = p.prompt_tokens || {};
      return row([p.id, String(size.system), String(size.tools), String(size.tools_compact), String(size.tool_count), String(size.total)]);
    }),
  );
  const data = await getJSON("/agents/reliability");
  $("#reliability tbody").replaceChildren(
    ...data.models.map((m) =>
      row([`${m.model} (${m.backend})`, m.native_calls, m.recovered_calls, m.repaired_arguments, m.refused_calls, m.unknown_tools, m.broken_loops,
        m.repeated_calls, m.constrained_calls, m.constrained_output || "not probed yet"].map(String)),
    ),
  );
}

async function start() {
  const [sessions, profiles, tools] = await Promise.all([api.sessions(), api.profiles(), api.tools()]);
  $("#profiles").textContent = JSON.stringify(profiles, null, 2);
  showModels(profiles).catch((err) => $("#reliability tbody").replaceChildren(row([`Could not load: ${err.message}`])));
  $("#tools tbody").replaceChildren(...tools.map((t) => row([t.name, t.builtin ? "builtin" : "user", t.description])));
  const select = $("#session-select");
  select.replaceChildren(
    ...sessions.map((s) => {
      const option = el("option", "", `${s.title || "New chat"} (${s.id.slice(0, 8)})`);
      option.value = s.id;
      return option;
    }),
  );
  const wanted = location.hash.slice(1) || (sessions[0] && sessions[0].id);
  if (wanted) {
    select.value = wanted;
    showSession(wanted);
  }
  select.addEventListener("change", () => {
    history.replaceState(null, "", `#${select.value}`);
    showSession(select.value);
  });
  document.body.dataset.ready = "1";
}

start().catch((err) => {
  document.querySelector("main").prepend(el("p", "error-box", `Could not load the debug data: ${err.message}`));
});
