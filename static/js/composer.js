// The input area: Enter sends, Shift+Enter is a newline; images (paste or attach) go as base64,
// other files are uploaded first and referenced by name/path; Stop during a run. The box stays
// editable during a run: what is sent then waits in a queue (cancellable) until the run ends.
import { api } from "./api.js";
import { el, fileChip, resourceChip } from "./cards.js";

const MAX_IMAGE_BYTES = 20 * 1024 * 1024;

function readAsDataURL(file) {
  return new Promise((resolve, reject) => {
    const reader = new FileReader();
    reader.onload = () => resolve(reader.result);
    reader.onerror = () => reject(reader.error);
    reader.readAsDataURL(file);
  });
}

const TOUCH = window.matchMedia("(pointer: coarse)");
const MAX_QUEUED = 5;

export class Composer {
  constructor(form, { getSession, onSend, onStop, onError }) {
    this.form = form;
    this.input = form.querySelector("#input");
    this.sendButton = form.querySelector("#send");
    this.stopButton = form.querySelector("#stop");
    this.attachments = form.querySelector("#attachments");
    this.getSession = getSession;
    this.onSend = onSend;
    this.onError = onError;
    this.images = []; // data: URIs
    this.files = []; // {name, path, size}
    this.resources = []; // {server_id, server, uri, name}: MCP resources, read by the server when sent
    this.running = false;
    this.busy = false; // an upload is in flight
    this.queued = []; // {content, images, files} sent during a run, oldest first
    this.queueList = form.querySelector("#queued");

    form.addEventListener("submit", (e) => {
      e.preventDefault();
      this.send();
    });
    this.input.addEventListener("keydown", (e) => {
      if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
        e.preventDefault();
        this.send();
      }
    });
    this.input.addEventListener("input", () => this.autosize());
    // At phone width the full hint would wrap over several lines of an empty box.
    const fullHint = this.input.placeholder;
    const narrow = window.matchMedia("(max-width: 480px)");
    this.hint = () => (narrow.matches ? "Message Navi" : fullHint);
    const hint = () => {
      this.input.placeholder = this.hint();
      this.autosize();
    };
    narrow.addEventListener("change", hint);
    hint();
    this.input.addEventListener("paste", (e) => {
      const images = [...(e.clipboardData?.files || [])].filter((f) => f.type.startsWith("image/"));
      if (images.length) {
        e.preventDefault();
        images.forEach((f) => this.addImage(f));
      }
    });
    form.querySelector("#attach-image").addEventListener("change", (e) => {
      [...e.target.files].forEach((f) => this.addImage(f));
      e.target.value = "";
    });
    form.querySelector("#attach-file").addEventListener("change", (e) => {
      [...e.target.files].forEach((f) => this.addFile(f));
      e.target.value = "";
    });
    this.stopButton.addEventListener("click", () => onStop());
    // Real buttons (keyboard-reachable) that open the hidden file pickers.
    form.querySelector("#image-button").addEventListener("click", () => form.querySelector("#attach-image").click());
    form.querySelector("#file-button").addEventListener("click", () => form.querySelector("#attach-file").click());
  }

  autosize() {
    this.input.style.height = "auto";
    this.input.style.height = `${Math.min(this.input.scrollHeight, 240)}px`;
  }

  async addImage(file) {
    if (file.size > MAX_IMAGE_BYTES) {
      this.onError(`${file.name} is larger than 20 MB; attach a smaller image`);
      return;
    }
    this.images.push(await readAsDataURL(file));
    this.renderAttachments();
  }

  async addFile(file) {
    const sid = this.getSession();
    if (!sid) return;
    this.busy = true;
    this.update();
    const chip = el("span", "chip uploading", `Uploading ${file.name}…`);
    this.attachments.append(chip);
    try {
      this.files.push(await api.upload(sid, file));
    } catch (err) {
      this.onError(`upload of ${file.name} failed: ${err.message}`);
    } finally {
      this.busy = false;
      this.renderAttachments();
      this.update();
    }
  }

  renderAttachments() {
    const chips = [];
    this.images.forEach((src, i) => {
      const chip = el("span", "chip image");
      const img = el("img");
      img.src = src;
      img.alt = "image to send";
      chip.append(img, this.removeButton(() => this.images.splice(i, 1)));
      chips.push(chip);
    });
    this.files.forEach((f, i) => {
      const chip = fileChip(f.name, "chip file");
      chip.append(this.removeButton(() => this.files.splice(i, 1)));
      chips.push(chip);
    });
    this.resources.forEach((r, i) => {
      const chip = resourceChip(r.server, r.name, "chip resource");
      chip.append(this.removeButton(() => this.resources.splice(i, 1)));
      chips.push(chip);
    });
    this.attachments.replaceChildren(...chips);
  }

  removeButton(remove) {
    const b = el("button", "icon remove", "×");
    b.type = "button";
    b.title = "Remove";
    b.addEventListener("click", () => {
      remove();
      this.renderAttachments();
    });
    return b;
  }

  send() {
    const content = this.input.value.trim();
    if ((!content && !this.images.length) || this.busy || !this.getSession()) return;
    const message = { content, images: this.images, files: this.files.map((f) => ({ name: f.name, path: f.path })),
      resources: this.resources };
    if (this.running) {
      if (this.queued.length >= MAX_QUEUED) {
        this.onError(`${MAX_QUEUED} messages are already waiting; cancel one or wait for the answer`);
        return;
      }
      this.queued.push(message);
      this.renderQueue();
    } else if (this.onSend(message) === false) {
      return;
    }
    this.input.value = "";
    this.images = [];
    this.files = [];
    this.resources = [];
    this.renderAttachments();
    this.autosize();
  }

  /** An MCP resource to attach to the next message (one chip per resource, at most 3). */
  addResource(resource) {
    if (this.resources.some((r) => r.server_id === resource.server_id && r.uri === resource.uri)) return;
    if (this.resources.length >= 3) {
      this.onError("3 resources are attached already; remove one first");
      return;
    }
    this.resources.push(resource);
    this.renderAttachments();
  }

  /** The server refused a message (e.g. its MCP server is down): it comes back to the box. */
  restore(message) {
    if (!this.input.value) this.input.value = message.content;
    this.images = message.images || [];
    this.files = message.files || [];
    this.resources = message.resources || [];
    this.renderAttachments();
    this.autosize();
  }

  renderQueue() {
    this.queueList.replaceChildren(
      ...this.queued.map((message, i) => {
        const item = el("li", "queued");
        const text = message.content || `${message.images.length} image(s)`;
        const cancel = el("button", "icon remove", "×");
        cancel.type = "button";
        cancel.setAttribute("aria-label", `Cancel the queued message: ${text.slice(0, 60)}`);
        cancel.addEventListener("click", () => {
          this.queued.splice(i, 1);
          this.renderQueue();
          this.input.focus();
        });
        item.append(el("span", "label", "Queued"), el("span", "queued-text", text), cancel);
        return item;
      }),
    );
  }

  /** The chat was left: its queued messages are not sent elsewhere; the first comes back to the box. */
  dropQueue() {
    const first = this.queued[0];
    if (first && !this.input.value) this.input.value = first.content;
    this.queued = [];
    this.renderQueue();
  }

  setRunning(running) {
    this.running = running;
    if (!running) this.setStopping(false);
    if (!running && this.queued.length) {
      const next = this.queued.shift();
      this.renderQueue();
      if (this.onSend(next) !== false) return; // runs again at once
    }
    this.update();
    if (!running && !TOUCH.matches) this.input.focus(); // on a phone, focus would pop the keyboard up
  }

  /** After a click on Stop: the button says so until the run has ended. */
  setStopping(stopping) {
    this.stopButton.disabled = stopping;
    this.stopButton.textContent = stopping ? "Stopping…" : "Stop";
  }

  update() {
    this.input.disabled = false; // typing (and queueing) during a run is allowed
    this.sendButton.disabled = this.running || this.busy;
    this.stopButton.hidden = !this.running;
    this.sendButton.hidden = this.running;
    this.form.classList.toggle("running", this.running);
  }
}
