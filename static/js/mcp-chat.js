// MCP in the composer: the "Resource" menu attaches one of the owner's servers' resources to the
// next message (the server reads it when the message is sent), and "/" offers the servers'
// prompts as slash commands whose text is put into the box (arguments first, in a small form).
// GET /mcp/servers answers only the caller's own and the global servers.
import { api } from "./api.js";
import { el } from "./cards.js";

/** Servers that are on and list resources or prompts. */
async function loadServers() {
  try {
    const servers = await api.mcpServers();
    return servers.filter((s) => s.enabled && ((s.resources || []).length || (s.prompts || []).length));
  } catch {
    return []; // MCP is optional: the composer works without it
  }
}

export class McpComposer {
  constructor(form, composer, { onError }) {
    this.form = form;
    this.composer = composer;
    this.input = composer.input;
    this.onError = onError;
    this.servers = [];
    this.button = form.querySelector("#resource-button");
    this.menu = form.querySelector("#resource-menu");
    this.slash = form.querySelector("#slash-menu");
    this.argsForm = form.querySelector("#prompt-args");
    this.matches = [];
    this.active = -1;

    this.button.addEventListener("click", () => (this.menu.hidden ? this.openMenu() : this.closeMenu(true)));
    this.menu.addEventListener("keydown", (e) => this.menuKeys(e));
    this.input.addEventListener("input", () => this.updateSlash());
    this.input.addEventListener("keydown", (e) => this.slashKeys(e), true);
    this.input.addEventListener("blur", () => setTimeout(() => {
      if (!this.slash.contains(document.activeElement)) this.closeSlash();
    }, 150));
    document.addEventListener("click", (e) => {
      if (!this.menu.hidden && !this.menu.contains(e.target) && e.target !== this.button) this.closeMenu(false);
    });
    this.refresh();
  }

  async refresh() {
    this.servers = await loadServers();
    this.button.hidden = !this.servers.some((s) => (s.resources || []).length);
    document.body.dataset.mcpChatReady = "1";
  }

  // --- resources ------------------------------------------------------------------------------
  async openMenu() {
    await this.refresh();
    const items = [];
    for (const server of this.servers) {
      for (const r of server.resources || []) {
        const b = el("button", "resource-item");
        b.type = "button";
        b.setAttribute("role", "menuitem");
        b.append(el("span", "resource-name", r.name || r.uri), el("span", "resource-where", `${server.name} · ${r.uri}`));
        if (r.description) b.title = r.description;
        b.addEventListener("click", () => {
          this.composer.addResource({ server_id: server.id, server: server.name, uri: r.uri, name: r.name || r.uri });
          this.closeMenu(true);
        });
        items.push(b);
      }
    }
    if (!items.length) items.push(el("p", "muted", "None of your MCP servers lists a resource."));
    this.menu.replaceChildren(...items);
    this.menu.hidden = false;
    this.button.setAttribute("aria-expanded", "true");
    this.menu.querySelector("button")?.focus();
  }

  closeMenu(refocus) {
    this.menu.hidden = true;
    this.button.setAttribute("aria-expanded", "false");
    if (refocus) this.button.focus();
  }

  menuKeys(e) {
    const items = [...this.menu.querySelectorAll("button")];
    const at = items.indexOf(document.activeElement);
    if (e.key === "Escape") {
      e.preventDefault();
      e.stopPropagation();
      this.closeMenu(true);
    } else if (e.key === "ArrowDown" || e.key === "ArrowUp") {
      e.preventDefault();
      const step = e.key === "ArrowDown" ? 1 : -1;
      items[(at + step + items.length) % items.length]?.focus();
    }
  }

  // --- prompts as slash commands ------------------------------------------------------------
  prompts() {
    return this.servers.flatMap((server) => (server.prompts || []).map((p) => ({ server, prompt: p })));
  }

  updateSlash() {
    const value = this.input.value;
    if (value === "/") this.refresh().then(() => this.input.value === "/" && this.renderMatches());
    this.renderMatches();
  }

  renderMatches() {
    const value = this.input.value;
    const typed = /^\/(\S*)$/.exec(value);
    if (!typed || !this.prompts().length) {
      this.closeSlash();
      return;
    }
    const word = typed[1].toLowerCase();
    const key = (m) => `${m.server.id}/${m.prompt.name}`;
    const before = this.slash.hidden ? "" : this.matches.map(key).join(",");
    this.matches = this.prompts().filter(({ server, prompt }) =>
      prompt.name.toLowerCase().includes(word) || server.name.toLowerCase().includes(word));
    if (before && before === this.matches.map(key).join(",")) return; // the same list: keep the choice
    this.active = this.matches.length ? 0 : -1;
    this.renderSlash();
  }

  renderSlash() {
    if (!this.matches.length) {
      this.slash.replaceChildren(el("li", "muted", "No MCP prompt matches; Esc closes"));
    } else {
      this.slash.replaceChildren(...this.matches.map(({ server, prompt }, i) => {
        const li = el("li", "slash-item");
        li.id = `slash-${i}`;
        li.setAttribute("role", "option");
        li.setAttribute("aria-selected", i === this.active ? "true" : "false");
        li.append(el("span", "slash-name", `/${prompt.name}`), el("span", "slash-where", server.name));
        if (prompt.description) li.append(el("span", "slash-description", prompt.description));
        li.addEventListener("mousedown", (e) => e.preventDefault()); // keep focus in the box
        li.addEventListener("click", () => this.choose(i));
        return li;
      }));
    }
    this.slash.hidden = false;
    if (this.active >= 0) this.input.setAttribute("aria-activedescendant", `slash-${this.active}`);
    else this.input.removeAttribute("aria-activedescendant");
  }

  closeSlash() {
    if (this.slash.hidden) return;
    this.slash.hidden = true;
    this.input.removeAttribute("aria-activedescendant");
  }

  slashKeys(e) {
    if (this.slash.hidden) return;
    if (e.key === "Escape") {
      e.preventDefault();
      e.stopImmediatePropagation(); // Esc closes the list, it does not stop a run
      this.closeSlash();
    } else if ((e.key === "ArrowDown" || e.key === "ArrowUp") && this.matches.length) {
      e.preventDefault();
      const step = e.key === "ArrowDown" ? 1 : -1;
      this.active = (this.active + step + this.matches.length) % this.matches.length;
      this.renderSlash();
      this.slash.querySelector(`#slash-${this.active}`)?.scrollIntoView({ block: "nearest" });
    } else if ((e.key === "Enter" || e.key === "Tab") && !e.shiftKey && this.active >= 0) {
      e.preventDefault();
      e.stopImmediatePropagation(); // Enter picks the prompt; it does not send "/…"
      this.choose(this.active);
    }
  }

  choose(i) {
    const { server, prompt } = this.matches[i];
    this.closeSlash();
    if ((prompt.arguments || []).length) this.askArguments(server, prompt);
    else this.fetchPrompt(server, prompt, {});
  }

  askArguments(server, prompt) {
    const fields = prompt.arguments.map((arg, i) => {
      const id = `prompt-arg-${i}`;
      const label = el("label", "", `${arg.name}${arg.required ? " (required)" : ""}`);
      label.htmlFor = id;
      const input = el("input");
      input.id = id;
      input.name = arg.name;
      input.required = !!arg.required;
      if (arg.description) input.placeholder = arg.description;
      const field = el("div", "field");
      field.append(label, input);
      return field;
    });
    const title = el("p", "prompt-title", `/${prompt.name} from ${server.name}`);
    const insert = el("button", "primary", "Insert");
    insert.type = "button";
    const cancel = el("button", "", "Cancel");
    cancel.type = "button";
    const actions = el("div", "actions");
    actions.append(insert, cancel);
    this.argsForm.replaceChildren(title, ...fields, actions);
    this.argsForm.hidden = false;
    const close = () => {
      this.argsForm.hidden = true;
      this.argsForm.replaceChildren();
      this.input.focus();
    };
    cancel.addEventListener("click", close);
    // A group inside the composer's form (forms do not nest): Enter inserts, Esc cancels.
    const submit = () => {
      const inputs = [...this.argsForm.querySelectorAll("input")];
      const missing = inputs.find((input) => input.required && !input.value.trim());
      if (missing) {
        missing.focus();
        this.onError(`Fill in ${missing.name}: /${prompt.name} needs it`);
        return;
      }
      const values = {};
      for (const input of inputs) if (input.value) values[input.name] = input.value;
      close();
      this.fetchPrompt(server, prompt, values);
    };
    insert.addEventListener("click", submit);
    this.argsForm.onkeydown = (e) => {
      if (e.key === "Escape") {
        e.preventDefault();
        e.stopPropagation();
        close();
      } else if (e.key === "Enter" && e.target.tagName === "INPUT") {
        e.preventDefault();
        e.stopPropagation();
        submit();
      }
    };
    this.argsForm.querySelector("input")?.focus();
  }

  async fetchPrompt(server, prompt, values) {
    this.input.value = "";
    this.input.placeholder = `Fetching /${prompt.name}…`;
    try {
      const answer = await api.mcpPrompt(server.id, prompt.name, values);
      this.input.value = answer.messages.map((m) => m.text).join("\n\n");
    } catch (err) {
      this.input.value = `/${prompt.name}`;
      this.onError(`The prompt /${prompt.name} of ${server.name} could not be fetched: ${err.message}`);
    } finally {
      this.input.placeholder = this.composer.hint();
      this.composer.autosize();
      this.input.focus();
    }
  }
}
