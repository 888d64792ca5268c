// The session list: pinned first, then by last activity (the server's order); rename, pin,
// delete (with confirm) and "new chat" with a profile selector.
import { api } from "./api.js";
import { el } from "./cards.js";

export class Sidebar {
  constructor(root, { onOpen, onNew, onDeleted, onError }) {
    this.root = root;
    this.list = root.querySelector("#session-list");
    this.profileSelect = root.querySelector("#profile-select");
    this.onOpen = onOpen;
    this.onDeleted = onDeleted;
    this.onError = onError;
    this.sessions = [];
    this.current = null;
    root.querySelector("#new-chat").addEventListener("click", () => onNew(this.profileSelect.value));
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
  }

  async refresh() {
    this.sessions = await api.sessions();
    this.render();
    return this.sessions;
  }

  select(id) {
    this.current = id;
    for (const item of this.list.children) item.classList.toggle("active", item.dataset.id === id);
  }

  render() {
    this.list.replaceChildren(...this.sessions.map((s) => this.item(s)));
  }

  item(s) {
    const li = el("li", `session${s.pinned ? " pinned" : ""}${s.id === this.current ? " active" : ""}`);
    li.dataset.id = s.id;
    const link = el("a", "session-title", s.title || "New chat");
    link.href = `#${s.id}`;
    link.title = s.title || "New chat";
    link.addEventListener("click", () => this.onOpen(s.id));
    const actions = el("div", "session-actions");
    const pin = this.button(s.pinned ? "★" : "☆", s.pinned ? "Unpin" : "Pin", "pin", () => this.togglePin(s));
    const rename = this.button("✎", "Rename", "rename", () => this.startRename(li, s));
    const del = this.button("✕", "Delete", "delete", () => this.remove(s));
    actions.append(pin, rename, del);
    li.append(link, actions);
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
    const finish = async (save) => {
      if (finished) return;
      finished = true;
      try {
        if (save && input.value.trim() !== (s.title || "")) await api.rename(s.id, input.value.trim());
      } catch (err) {
        this.onError(err.message);
      }
      await this.refresh();
    };
    input.addEventListener("keydown", (e) => {
      if (e.key === "Enter") finish(true);
      if (e.key === "Escape") finish(false);
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
