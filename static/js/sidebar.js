// The session list: pinned first, then by last activity (the server's order); rename, pin,
// delete (with confirm) and "new chat" with a profile selector.
import { api } from "./api.js";
import { el } from "./cards.js";
import DOMPurify from "/static/vendor/purify.es.mjs";

export class Sidebar {
  constructor(root, { onOpen, onNew, onDeleted, onError, onImported, onRenamed }) {
    this.root = root;
    this.list = root.querySelector("#session-list");
    // One profile control on the page (the chat header's): a new chat starts with your default
    // profile, kept here in a select that is not shown.
    this.profileSelect = document.createElement("select");
    this.searchBox = root.querySelector("#search");
    this.onOpen = onOpen;
    this.onDeleted = onDeleted;
    this.onError = onError;
    this.onImported = onImported;
    this.onRenamed = onRenamed;
    this.sessions = [];
    this.results = null; // search results while the search box has words
    this.current = null;
    root.querySelector("#new-chat").addEventListener("click", () => onNew(this.profileSelect.value));
    let timer;
    this.searchBox.addEventListener("input", () => {
      clearTimeout(timer);
      timer = setTimeout(() => this.search(this.searchBox.value.trim()), 250);
    });
    this.searchBox.addEventListener("keydown", (e) => {
      if (e.key === "Escape" && this.searchBox.value) {
        e.preventDefault();
        this.searchBox.value = "";
        this.search("");
      }
    });
    root.querySelector("#import-file").addEventListener("change", (e) => {
      const [file] = e.target.files;
      e.target.value = "";
      if (file) this.importFile(file);
    });
    root.querySelector("#import-button").addEventListener("click", () => root.querySelector("#import-file").click());
    this.list.addEventListener("keydown", (e) => this.arrowKeys(e));
  }

  /** The list is one Tab stop: arrows move between chats (Up/Down, Home/End) and along a chat's
   * own buttons (Right/Left), so a keyboard user does not tab through four stops per chat. */
  arrowKeys(e) {
    const rows = [...this.list.querySelectorAll(":scope > li.session")];
    const li = e.target.closest("li.session");
    if (!li || !rows.length) return;
    const stops = [...li.querySelectorAll(".session-title, .session-actions button")];
    const at = stops.indexOf(e.target);
    let next = null;
    if (e.key === "ArrowDown" || e.key === "ArrowUp") {
      const row = rows[Math.min(rows.length - 1, Math.max(0, rows.indexOf(li) + (e.key === "ArrowDown" ? 1 : -1)))];
      next = row.querySelector(".session-title");
    } else if (e.key === "Home" || e.key === "End") {
      next = rows[e.key === "Home" ? 0 : rows.length - 1].querySelector(".session-title");
    } else if ((e.key === "ArrowRight" || e.key === "ArrowLeft") && at >= 0) {
      next = stops[Math.min(stops.length - 1, Math.max(0, at + (e.key === "ArrowRight" ? 1 : -1)))];
    }
    if (!next) return;
    e.preventDefault();
    this.rove(next);
    next.focus();
  }

  /** Make `target` (default: the open chat's link, else the first) the list's one Tab stop. */
  rove(target = null) {
    const stops = [...this.list.querySelectorAll(".session-title, .session-actions button")];
    target = target || this.list.querySelector("li.active .session-title") || stops[0];
    for (const stop of stops) stop.tabIndex = stop === target ? 0 : -1;
  }

  async search(q) {
    this.query = q;
    if (!q) {
      this.results = null;
      this.render();
      return;
    }
    try {
      const results = await api.search(q);
      if (this.query !== q) return; // a newer search is on its way
      this.results = results;
      this.render();
    } catch (err) {
      this.onError(`Search failed: ${err.message}`);
    }
  }

  async importFile(file) {
    try {
      const data = JSON.parse(await file.text());
      const created = await api.importSession(data);
      await this.refresh();
      this.onImported(created);
    } catch (err) {
      this.onError(`Import of ${file.name} failed: ${err instanceof SyntaxError ? "not a JSON export" : err.message}`);
    }
  }

  async loadProfiles() {
    const profiles = await api.profiles();
    this.profileSelect.replaceChildren(
      ...profiles.map((p) => {
        const option = el("option", "", p.name || p.id);
        option.value = p.id;
        return option;
      }),
    );
    return profiles;
  }

  async refresh() {
    this.sessions = await api.sessions();
    this.render();
    return this.sessions;
  }

  select(id) {
    this.current = id;
    for (const item of this.list.children) item.classList.toggle("active", item.dataset.id === id);
    const active = this.list.querySelector(":scope > li.active");
    if (active) {
      if (!this.list.contains(document.activeElement)) this.rove();
      active.scrollIntoView({ block: "nearest" }); // the open chat is in view in a long list
    }
  }

  render() {
    // Redrawing (a refresh after Pin, a run's end, a search) must not drop a keyboard user's focus.
    const focused = this.list.contains(document.activeElement) ? document.activeElement : null;
    const id = focused?.closest("li")?.dataset.id;
    const part = focused?.matches(".session-title") ? ".session-title" : focused?.matches(".session-actions button") ? `button.${focused.classList[1]}` : null;
    this.draw();
    const again = id && part && this.list.querySelector(`li[data-id="${CSS.escape(id)}"] ${part}`);
    if (again) {
      this.rove(again);
      again.focus({ preventScroll: true });
    }
  }

  draw() {
    if (this.results) {
      const items = this.results.map((s) => this.item(s));
      if (!items.length) items.push(el("li", "no-results", "No chat matches these words."));
      this.list.replaceChildren(...items);
      this.list.classList.add("results");
      this.rove();
      return;
    }
    this.list.classList.remove("results");
    this.list.replaceChildren(...this.sessions.map((s) => this.item(s)));
    this.rove();
  }

  item(s) {
    const unread = s.unread && s.id !== this.current;  // a routine wrote here since the owner last looked
    const li = el("li", `session${s.pinned ? " pinned" : ""}${s.id === this.current ? " active" : ""}${unread ? " unread" : ""}`);
    li.dataset.id = s.id;
    const link = el("a", "session-title", s.title || "New chat");
    link.href = `#${s.id}`;
    link.title = s.title || "New chat";
    if (unread) {
      const mark = el("span", "unread-mark", "●");
      mark.title = "New from a routine, not opened yet";
      link.prepend(mark);
      link.setAttribute("aria-label", `${s.title || "New chat"} (new from a routine, unread)`);
    }
    link.addEventListener("click", () => {
      s.unread = false;  // opening it reads it (GET /sessions/<id> clears the flag)
      li.classList.remove("unread");
      link.querySelector(".unread-mark")?.remove();
      link.removeAttribute("aria-label");
      // A search result opens at the message that matched (its words highlighted).
      this.onOpen(s.id, this.results && s.match_message_id ? { messageId: s.match_message_id, query: this.query } : null);
    });
    const actions = el("div", "session-actions");
    const pin = this.button(s.pinned ? "★" : "☆", s.pinned ? "Unpin" : "Pin", "pin", () => this.togglePin(s));
    const rename = this.button("✎", "Rename", "rename", () => this.startRename(li, s));
    const del = this.button("✕", "Delete", "delete", () => this.remove(s));
    actions.append(pin, rename, del);
    li.append(link, actions);
    if (s.snippet) {
      // Server-made HTML (text escaped, matches in <mark>): still sanitised, only <mark> kept.
      const snippet = el("div", "snippet");
      snippet.replaceChildren(DOMPurify.sanitize(s.snippet, { ALLOWED_TAGS: ["mark"], ALLOWED_ATTR: [], RETURN_DOM_FRAGMENT: true }));
      snippet.addEventListener("click", () => link.click()); // the snippet opens the chat too (at the match)
      li.append(snippet);
    }
    link.addEventListener("dblclick", (e) => {
      e.preventDefault();
      this.startRename(li, s);
    });
    return li;
  }

  button(text, label, cls, handler) {
    const b = el("button", `icon ${cls}`, text);
    b.type = "button";
    b.title = label;
    b.setAttribute("aria-label", label);
    b.addEventListener("click", (e) => {
      e.stopPropagation();
      handler();
    });
    return b;
  }

  async togglePin(s) {
    try {
      await api.pin(s.id, !s.pinned);
      await this.refresh();
      // The list was redrawn (the chat moved): focus stays on this chat's Pin/Unpin button.
      const pin = this.list.querySelector(`li[data-id="${CSS.escape(s.id)}"] button.pin`);
      if (pin) {
        this.rove(pin);
        pin.focus();
      }
    } catch (err) {
      this.onError(err.message);
    }
  }

  startRename(li, s) {
    const input = el("input", "rename-input");
    input.value = s.title || "";
    input.maxLength = 200;
    input.setAttribute("aria-label", "Session title");
    li.querySelector(".session-title").replaceWith(input);
    input.focus();
    input.select();
    let finished = false;
    const finish = async (save, keyboard = false) => {
      if (finished) return;
      finished = true;
      try {
        if (save && input.value.trim() !== (s.title || "")) {
          await api.rename(s.id, input.value.trim());
          this.onRenamed(s.id, input.value.trim());
        }
      } catch (err) {
        this.onError(err.message);
      }
      await this.refresh();
      if (this.query) await this.search(this.query);
      if (keyboard) {
        // Enter or Esc: the keyboard user goes on from the renamed chat, not from the page's top.
        const link = this.list.querySelector(`li[data-id="${CSS.escape(s.id)}"] .session-title`);
        if (link) {
          this.rove(link);
          link.focus();
        }
      }
    };
    input.addEventListener("keydown", (e) => {
      if (e.key === "Enter") {
        e.preventDefault();
        finish(true, true);
      }
      if (e.key === "Escape") {
        e.preventDefault(); // not a Stop of the running answer
        finish(false, true);
      }
    });
    input.addEventListener("blur", () => finish(true));
  }

  async remove(s) {
    if (!window.confirm(`Delete "${s.title || "New chat"}" and its messages and files? This cannot be undone.`)) return;
    try {
      await api.remove(s.id);
      await this.refresh();
      this.onDeleted(s.id);
    } catch (err) {
      this.onError(err.message);
    }
  }
}
