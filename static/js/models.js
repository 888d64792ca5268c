// The chat's model: a picker in the header listing what the profiles' servers have (GET /models) —
// the models that can chat; embedding-only and missing ones shown disabled with why —, the notice
// when the default is not installed (the server uses an installed one: agent.llm.choice), the
// empty state of a server with no models, and pulling one with a progress bar.
import { api, csrfToken } from "./api.js";

const GB = 1024 ** 3;

function sizeText(bytes) {
  if (!bytes) return "";
  return bytes >= GB ? ` (${(bytes / GB).toFixed(1)} GB)` : ` (${Math.round(bytes / 1024 ** 2)} MB)`;
}

// Small models to start with (download sizes of the default tags, Ollama's library).
const SUGGESTIONS = [
  { name: "qwen2.5:0.5b", size: "398 MB", what: "tiny, fast, basic answers", chip: true },
  { name: "llama3.2:1b", size: "1.3 GB", what: "small, calls tools", chip: true },
  { name: "qwen2.5:3b", size: "1.9 GB", what: "a good first model, calls tools", chip: true },
  { name: "gemma3:1b", size: "815 MB", what: "small, no tool calls" },
  { name: "llama3.2:3b", size: "2.0 GB", what: "calls tools" },
  { name: "qwen3:4b", size: "2.6 GB", what: "thinks before answering, calls tools" },
  { name: "gemma3:4b", size: "3.3 GB", what: "reads images" },
  { name: "nomic-embed-text", size: "274 MB", what: "embeddings for Knowledge (cannot chat)" },
];

const same = (a, b) => a.replace(/:latest$/, "") === b.replace(/:latest$/, "");

export class ModelPicker {
  constructor(select, notice, { onError, onChanged }) {
    this.select = select;
    this.notice = notice;
    this.onError = onError;
    this.onChanged = onChanged;
    this.listing = { models: [], default: "", can_pull: false };
    this.session = null;
    select.addEventListener("change", () => this.pick(select.value));
  }

  async load() {
    try {
      this.listing = await api.models();
    } catch (err) {
      this.listing = { models: [], default: "", can_pull: false, errors: { page: err.message } };
    }
    return this.listing;
  }

  /** The models of this chat's server (its profile's backend). */
  available(session) {
    return this.listing.models.filter((m) => m.backend === (session.profile_backend || "ollama"));
  }

  /** Draw the picker for `session`. A default that is not on the server is stood in for by the
   * server (agent.llm.choice): the page says so once, with a close button and where to fix it. */
  async show(session) {
    this.session = session;
    const models = this.available(session);
    const chatty = models.filter((m) => !m.embedding); // an embedding model cannot answer
    const follows = !session.model && same(session.profile_model || "", this.listing.default || "");
    if (!chatty.length) {
      this.emptyState(models.length > 0);
    } else if (follows && this.listing.default_missing && this.listing.stand_in) {
      this.standInNotice(this.listing.default, this.listing.stand_in);
    } else {
      this.say("");
    }
    this.draw(session, models);
  }

  /** "The default model X is not on the server, so Navi uses Y": once per X → Y, until closed. */
  standInNotice(wanted, used) {
    const key = `navi.standin.${wanted}>${used}`;
    if (localStorage.getItem(key)) {
      this.say("");
      return;
    }
    this.say(`The default model “${wanted}” is not on the server, so Navi uses “${used}”. Pick another above for this chat.`);
    const row = document.createElement("p");
    row.className = "notice-actions";
    if (this.listing.can_pull) {
      const fix = Object.assign(document.createElement("a"), { href: "/settings/#connections", textContent: "Choose the default model in Settings" });
      row.append(fix);
    }
    const close = Object.assign(document.createElement("button"), { type: "button", className: "notice-close", textContent: "×" });
    close.setAttribute("aria-label", "Close this notice");
    close.addEventListener("click", () => {
      localStorage.setItem(key, "1");
      this.say("");
    });
    this.notice.prepend(close);
    this.notice.append(row);
  }

  draw(session, models) {
    const options = [];
    const standIn = !session.profile_model || !this.listing.default_missing || !same(session.profile_model, this.listing.default || "")
      ? "" : this.listing.stand_in;
    const label = standIn ? `Default (${standIn})` : `Profile's model (${session.profile_model || "none"})`;
    options.push(new Option(label, ""));
    for (const m of models) {
      const option = new Option(m.embedding ? `${m.name} — embeddings only, cannot chat` : `${m.name}${sizeText(m.size)}`, m.name);
      option.disabled = !!m.embedding;
      options.push(option);
    }
    if (session.model && !models.some((m) => same(m.name, session.model))) {
      const gone = new Option(`${session.model} — not on the server`, session.model);
      gone.disabled = true;
      options.push(gone);
    }
    if (this.listing.can_pull) options.push(new Option("Pull a model…", "__pull__"));
    this.select.replaceChildren(...options);
    this.select.value = session.model || "";
    this.select.title = `Model of this chat: ${session.model || standIn || session.profile_model || "none"}`;
  }

  async pick(value) {
    const session = this.session;
    if (!session) return;
    if (value === "__pull__") {
      this.select.value = session.model || "";
      this.pullForm();
      return;
    }
    try {
      const saved = await api.setModel(session.id, value);
      session.model = saved.model;
      this.onChanged?.(saved);
      this.say("");
    } catch (err) {
      this.onError(`Could not switch the model: ${err.message}`);
      this.select.value = session.model || "";
    }
  }

  say(text) {
    this.notice.replaceChildren();
    this.notice.hidden = !text;
    if (text) this.notice.append(Object.assign(document.createElement("p"), { textContent: text }));
  }

  emptyState(embeddingOnly = false) {
    const problem = Object.values(this.listing.errors || {})[0];
    if (problem) {
      this.say(`Cannot list the server's models: ${problem}`);
      return;
    }
    const none = embeddingOnly
      ? "The LLM server has only embedding models, which cannot chat, so Navi cannot answer."
      : "The LLM server has no models yet, so Navi cannot answer.";
    if (!this.listing.can_pull) {
      this.say(`${none} Ask the owner to pull one (Ollama: ollama pull qwen2.5:3b).`);
      return;
    }
    this.say(`${none} Pull one to start, for example qwen2.5:3b (about 2 GB).`);
    this.pullForm();
  }

  /** A name field with suggestions, Pull, a progress bar and Cancel (owner only: the server says can_pull). */
  pullForm() {
    if (this.notice.querySelector("form")) {
      this.notice.querySelector("input").focus();
      return;
    }
    this.notice.hidden = false;
    const form = document.createElement("form");
    form.className = "pull-form";
    const label = Object.assign(document.createElement("label"), { textContent: "Model to pull" });
    const input = Object.assign(document.createElement("input"), { name: "model", placeholder: "qwen2.5:3b", required: true });
    input.setAttribute("autocomplete", "off");
    input.setAttribute("list", "pull-suggestions");
    const list = Object.assign(document.createElement("datalist"), { id: "pull-suggestions" });
    for (const s of SUGGESTIONS) list.append(new Option(`${s.what}, ${s.size}`, s.name));
    label.append(input, list);
    const button = Object.assign(document.createElement("button"), { type: "submit", className: "primary", textContent: "Pull" });
    const cancel = Object.assign(document.createElement("button"), { type: "button", textContent: "Cancel", hidden: true });
    const progress = Object.assign(document.createElement("progress"), { max: 1, value: 0, hidden: true });
    progress.setAttribute("aria-label", "Pull progress");
    const status = Object.assign(document.createElement("span"), { className: "pull-status" });
    status.setAttribute("role", "status");
    const chips = document.createElement("div");
    chips.className = "pull-suggestions";
    chips.setAttribute("role", "group");
    chips.setAttribute("aria-label", "Small models to start with");
    for (const s of SUGGESTIONS.filter((x) => x.chip)) {
      const chip = Object.assign(document.createElement("button"), { type: "button", className: "chip", textContent: `${s.name} · ${s.size}` });
      chip.title = s.what;
      chip.addEventListener("click", () => {
        input.value = s.name;
        input.focus();
      });
      chips.append(chip);
    }
    form.append(label, button, cancel, progress, status, chips);
    form.addEventListener("submit", (e) => {
      e.preventDefault();
      this.pull(input.value.trim(), { button, cancel, progress, status, form });
    });
    this.notice.append(form);
    input.focus();
  }

  async pull(name, { button, cancel, progress, status, form }) {
    button.disabled = true;
    progress.hidden = false;
    progress.value = 0;
    cancel.hidden = false;
    status.textContent = `Pulling ${name}…`;
    const stop = new AbortController();
    const onCancel = () => stop.abort();
    cancel.addEventListener("click", onCancel);
    let last = {};
    const reset = () => {
      status.textContent = "";
      progress.hidden = true;
      cancel.hidden = true;
      cancel.removeEventListener("click", onCancel);
      button.disabled = false;
    };
    try {
      const response = await fetch("/models/pull", {
        method: "POST", credentials: "same-origin", signal: stop.signal,
        headers: { "Content-Type": "application/json", "X-CSRFToken": csrfToken() },
        body: JSON.stringify({ name }),
      });
      if (!response.ok) {
        const data = await response.json().catch(() => ({}));
        throw new Error(data.error || `the pull failed with HTTP ${response.status}`);
      }
      const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
      let rest = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        rest += value;
        const lines = rest.split("\n");
        rest = lines.pop();
        for (const line of lines.filter(Boolean)) {
          last = JSON.parse(line);
          if (last.total) progress.value = last.completed / last.total;
          status.textContent = last.error ? "" : `${name}: ${last.status}${last.total ? ` ${Math.round((100 * last.completed) / last.total)} %` : ""}`;
        }
      }
      if (last.error || last.status !== "success") throw new Error(last.error || "the pull ended before it finished; try again");
    } catch (err) {
      reset();
      if (stop.signal.aborted) {
        status.textContent = `Cancelled the pull of ${name}.`;
        return;
      }
      // The server says the cause (a server that cannot pull, a full disk, an unknown name).
      this.onError(`Could not pull ${name}: ${err.message}.`);
      return;
    }
    progress.value = 1;
    form.remove();
    await this.load();
    const session = this.session;
    const got = this.available(session).find((m) => same(m.name, name));
    if (got) await this.pick(got.name);
    this.draw(session, this.available(session));
    this.say(`Pulled ${name}; this chat uses it now.`);
  }
}
