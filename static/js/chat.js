// The conversation view: history from REST (paged twice: the server sends the newest messages
// and older pages on request, and of what is here only the newest groups are rendered, older
// ones as the reader scrolls up) and live runs from WebSocket frames.
import { announceApproval, approvalCard, pastApproval, reopenApproval, resolveApproval } from "./approvals.js";
import { copyText, renderMarkdown } from "./markdown.js";
import {
  actionButton, closeThinking, completeToolCard, el, errorBox, notice, planCard, publishedFile, setToolProgress,
  setToolStatus,
  statusBadge, subagentList, thinkingBlock, toolCard, userBubble,
} from "./cards.js";
import { sourceChips } from "./sources.js";

const PAGE = 30; // groups rendered per page of history
const TERMINAL = new Set(["stream_end", "stream_stopped", "error"]);

/** History rows → groups: a user message, or the assistant/tool rows that answered it. */
function groupRows(rows) {
  const groups = [];
  for (const row of rows) {
    if (row.role === "user") groups.push({ user: row });
    else if (groups.length && groups[groups.length - 1].rows) groups[groups.length - 1].rows.push(row);
    else groups.push({ rows: [row] });
  }
  return groups;
}

/** The versions of a turn's answer (on its last row), with the id to switch them by. */
function turnVersions(rows) {
  const row = rows.find((r) => r.versions);
  return row ? { ...row.versions, id: row.id } : null;
}

function assistantBubble(markdown, streaming = false) {
  const node = el("div", `bubble assistant markdown${streaming ? " streaming" : ""}`);
  node.source = markdown;
  if (markdown) renderMarkdown(node, markdown);
  return node;
}

/** What a tool row's meta recorded next to its card: sub-agent steps, files, memory notes. */
function renderToolMeta(turn, card, meta) {
  if (meta.approval) card.after(pastApproval(card.dataset.tool, meta.approval));
  for (const call of meta.subagent || []) {
    const sub = toolCard(call.tool, call.args);
    sub.dataset.sub = "1";
    completeToolCard(sub, call.result, call.success);
    subagentList(card).append(sub);
  }
  for (const f of meta.files || []) turn.append(publishedFile(f));
  for (const m of meta.memory || []) turn.append(notice(`Remembered (${m.category}) ${m.key}: ${m.value}`, "memory"));
  if (meta.profile_switched) {
    const p = meta.profile_switched;
    turn.append(notice(`Switched to profile ${p.profile_name || p.profile_id}`, "profile"));
  }
}

function renderTurnRows(rows) {
  const turn = el("div", "group turn");
  turn.dataset.ids = rows.map((r) => r.id).join(",");
  const cards = new Map();
  // A stopped turn says "Stopped." once, as it did live, even when a restart also marked its
  // cut-off answer interrupted.
  const stopped = rows.some((r) => (r.meta || {}).kind === "stopped");
  for (const row of rows) {
    const meta = row.meta || {};
    if (row.role === "assistant" && row.name === "plan") {
      turn.append(planCard(row.content, false));
      continue;
    }
    if (row.role === "assistant") {
      if (row.thinking) {
        const t = thinkingBlock(row.thinking, false);
        closeThinking(t);
        turn.append(t);
      }
      if (row.content) turn.append(assistantBubble(row.content));
      const sources = [row.sources, meta.sources].find(Array.isArray) || [];
      if (sources.length) turn.append(sourceChips(sources));
      for (const call of row.tool_calls || []) {
        const card = toolCard(call.name, call.arguments);
        cards.set(call.id, card);
        turn.append(card);
      }
      if ((row.status === "partial" || row.status === "interrupted") && !stopped) turn.append(statusBadge(row.status));
    } else if (row.role === "tool") {
      let card = cards.get(row.tool_call_id);
      if (!card) turn.append((card = toolCard(row.name || "tool", {})));
      completeToolCard(card, row.content, !String(row.content || "").startsWith("ERROR:"));
      renderToolMeta(turn, card, meta);
    } else if (meta.kind === "error") {
      turn.append(errorBox(row.content));
    } else if (meta.kind === "stopped") {
      turn.append(statusBadge("stopped"));
      turn.classList.add("stopped");
    } else if (row.content) {
      turn.append(notice(row.content));
    }
  }
  return turn;
}

/** Mark the words of a search in `root` (CSS Custom Highlight: the DOM is not changed). */
function highlightWords(root, query) {
  if (!window.CSS?.highlights || typeof Highlight === "undefined") return;
  const words = query.toLowerCase().split(/\s+/).filter((w) => w.length > 1);
  const ranges = [];
  const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
  for (let text = walker.nextNode(); text; text = walker.nextNode()) {
    const value = text.nodeValue.toLowerCase();
    for (const word of words) {
      for (let at = value.indexOf(word); at >= 0; at = value.indexOf(word, at + word.length)) {
        const range = new Range();
        range.setStart(text, at);
        range.setEnd(text, at + word.length);
        ranges.push(range);
      }
    }
  }
  CSS.highlights.set("search-hit", new Highlight(...ranges));
}

/** The live rendering of one run. */
class RunView {
  constructor(id, container) {
    this.id = id;
    this.el = el("div", "group turn live");
    this.el.dataset.runId = id;
    container.append(this.el);
    this.text = null; // {node, value} of the text block being streamed
    this.thinking = null; // {node, value}
    this.pending = []; // tool cards waiting for their tool_call
    this.spawn = null; // the running spawn_agent card (sub-agent cards nest under it)
    this.approvals = new Map(); // approval_id → approval card
    this.since = Date.now();
    this.phase = "Starting…"; // what the status line says while nothing streams
    this.status = el("div", "run-status");
    this.status.setAttribute("role", "status");
    this.el.append(this.status);
  }

  /** The status line is shown while the run waits (planning, the model's first token, after a tool). */
  tick() {
    const busy = this.done || this.text || this.thinking || this.pending.length || this.approvals.size && [...this.approvals.values()].some((c) => !c.classList.contains("done"));
    this.status.hidden = !!busy && !this.stopping;
    if (this.done) {
      this.status.remove();
      return;
    }
    const seconds = Math.floor((Date.now() - this.since) / 1000);
    this.status.textContent = this.stopping ? "Stopping…" : `${this.phase}${seconds >= 1 ? ` ${seconds} s` : ""}`;
    this.el.append(this.status); // keep it last
  }

  setPhase(text) {
    this.phase = text;
    this.since = Date.now();
    this.tick();
  }

  target(isSub) {
    return isSub && this.spawn ? subagentList(this.spawn) : this.el;
  }
}

/** When a message was written (`node.created`, ISO; now for one just sent or streamed): shown
 * on hover, keyboard focus or a long press (phones), the full date as its title. */
function timeStamp(node) {
  node.created = node.created || new Date().toISOString();
  const when = new Date(node.created);
  const stamp = el("time", "msg-time", when.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" }));
  stamp.dateTime = node.created;
  stamp.title = when.toLocaleString();
  return stamp;
}

/** A long press on a message (touch) shows its time, as hovering does with a mouse. */
function showTimesOnLongPress(list) {
  let timer = null;
  const cancel = () => clearTimeout(timer);
  list.addEventListener("pointerdown", (e) => {
    if (e.pointerType !== "touch") return;
    const group = e.target.closest(".group");
    timer = setTimeout(() => group?.classList.toggle("show-time"), 450);
  });
  for (const type of ["pointerup", "pointercancel", "pointermove"]) list.addEventListener(type, cancel);
  list.addEventListener("contextmenu", (e) => e.target.closest(".group")?.classList.add("show-time"));
}

export class ChatView {
  /**
   * hooks: onRunState(running), onContext(tokens, max), onRunEnd(run, frame), onApproval(id,
   * decision, remember), onToast(text), onEdit(messageId, content) → false when not sent,
   * onRegenerate() → false when not sent, onTitle(title), planMayCome() → bool, decorateAnswer(turn,
   * actions bar) and markVoice(user node, meta.voice) for what voice.js adds.
   */
  constructor(scroller, hooks) {
    this.scroller = scroller;
    this.hooks = hooks;
    this.list = el("div", "messages");
    this.sentinel = el("div", "older");
    scroller.replaceChildren(this.sentinel, this.list);
    showTimesOnLongPress(this.list);
    this.onRunState = hooks.onRunState;
    this.onContext = hooks.onContext;
    this.onRunEnd = hooks.onRunEnd;
    this.onApproval = hooks.onApproval;
    this.onToast = hooks.onToast;
    this.jump = hooks.jumpButton;
    this.rows = []; // the history rows fetched so far, oldest first
    this.hasMore = false; // older rows wait on the server
    this.groups = [];
    this.firstRendered = 0;
    this.run = null;
    this.localStart = false; // this tab sent the message that starts the next run
    this.tail = []; // nodes of the history after the last user message (replaced by a replay)
    this.renderQueued = false;
    this.observer = new IntersectionObserver((entries) => {
      if (entries.some((e) => e.isIntersecting)) this.renderOlder();
    }, { root: scroller, rootMargin: "800px 0px 0px 0px" });
    this.observer.observe(this.sentinel);
    // Pinned to the end while the reader has not scrolled up: whatever lays out later (an image
    // decoded, math typeset, code highlighted, an off-screen group measured for real instead of
    // its estimated height) keeps the newest message's bottom in view.
    this.pinned = true;
    new ResizeObserver(() => {
      if (this.pinned) this.scrollToBottom();
    }).observe(this.list);
    // Only the reader unpins: a scroll the browser makes itself (scroll anchoring while heights
    // settle, our own scrollTop writes) must not.
    let touched = 0;
    const intent = () => (touched = Date.now());
    for (const type of ["wheel", "touchmove", "pointerdown", "keydown"]) scroller.addEventListener(type, intent, { passive: true });
    document.addEventListener("keydown", (e) => {
      if (["PageUp", "PageDown", "Home", "End", "ArrowUp", "ArrowDown", " "].includes(e.key)) intent();
    });
    let height = 0;
    scroller.addEventListener("scroll", () => {
      // A scroll while the content's height changed and nobody touched anything is the browser
      // keeping its place (anchoring): it never unpins. Any other scroll is the reader's (or a
      // script's) and says where they want to be.
      const settling = scroller.scrollHeight !== height && Date.now() - touched > 1000;
      height = scroller.scrollHeight;
      if (!settling) this.pinned = this.nearBottom();
      else if (this.nearBottom()) this.pinned = true;
      if (this.nearBottom()) this.jump.hidden = true;
      // At the top with older messages still on the server (a failed fetch, or a page that held
      // no whole turn): the sentinel stays in view, so the observer would not fire again.
      if (this.firstRendered === 0 && this.hasMore && scroller.scrollTop < 800) this.fetchOlder();
    }, { passive: true });
    this.jump.addEventListener("click", () => {
      this.pinned = true;
      this.scrollToBottom();
      this.jump.hidden = true;
    });
    setInterval(() => this.run && !this.run.done && this.run.tick(), 1000);
  }

  // --- history -------------------------------------------------------------------------
  /** rows: the newest page of the chat; hasMore: older messages wait on the server. */
  loadHistory(rows, hasMore = false) {
    this.idsPending = false; // a chat drawn whole: every row has its id (a Retry queued for another chat is dropped)
    this.regenAfterIds = false;
    this.rows = rows;
    this.hasMore = hasMore;
    this.historyId = (this.historyId || 0) + 1; // an older page fetched for another chat is dropped
    this.fetching = false;
    this.groups = this.grouped();
    this.firstRendered = this.groups.length;
    this.list.replaceChildren();
    this.run = null;
    this.jump.hidden = true;
    this.renderOlder(true);
    const lastUser = this.groups.map((g) => !!g.user).lastIndexOf(true);
    this.lastUserText = lastUser >= 0 ? this.groups[lastUser].user.content || "" : null;
    this.tail = lastUser >= 0 ? [...this.list.children].slice(lastUser - this.firstRendered + 1) : [];
    this.pinned = true;
    this.scrollToBottom();
  }

  renderGroup(group) {
    if (!group.user) {
      const turn = renderTurnRows(group.rows);
      turn.versions = turnVersions(group.rows);
      turn.created = group.rows.at(-1)?.created_at;
      return this.decorateTurn(turn);
    }
    const u = group.user;
    const node = userBubble(u.content, u.images || []);
    node.dataset.messageId = u.id;
    node.created = u.created_at;
    if (u.meta?.voice) this.hooks.markVoice?.(node, u.meta.voice);
    if (u.meta?.routine) return this.decorateRoutine(node, u.meta.routine);
    return this.decorateUser(node, u.versions);
  }

  /** A routine's instruction: marked as the routine's (with a link to it), Copy but no Edit. */
  decorateRoutine(node, routine) {
    node.classList.add("routine-turn");
    const ran = new Date(routine.ran_at);
    const label = el("p", "routine-mark");
    const link = el("a", "", `Routine “${routine.name}”`);
    link.href = `/routines/#routine-${encodeURIComponent(routine.id)}`;
    const time = el("time", "", Number.isNaN(ran.getTime()) ? "" : ran.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" }));
    time.dateTime = routine.ran_at || "";
    time.title = Number.isNaN(ran.getTime()) ? "" : ran.toLocaleString();
    label.append(link, " ran at ", time);
    node.prepend(label);
    const bar = el("div", "msg-actions");
    bar.append(actionButton("Copy", "copy-message", "Copy this instruction", (e) => this.copy(e.currentTarget, node.source)));
    node.append(bar);
    return node;
  }

  /** Copy and Edit under a user message (Edit needs the message's id: known once saved), and
   * "‹ n/m ›" when it was edited. */
  decorateUser(node, versions = null) {
    const bar = el("div", "msg-actions");
    bar.append(
      actionButton("Copy", "copy-message", "Copy this message", (e) => this.copy(e.currentTarget, node.source)),
      actionButton("Edit", "edit", "Edit this message and answer it again", () => this.startEdit(node)),
    );
    bar.append(timeStamp(node));
    node.append(bar);
    this.setUserVersions(node, versions);
    return node;
  }

  setUserVersions(node, versions) {
    const bar = node.querySelector(":scope > .msg-actions");
    bar?.querySelector(":scope > .versions")?.remove();
    if (bar && versions) bar.prepend(this.versionControl(node.dataset.messageId, versions));
  }

  /** "‹ n/m ›": the versions of a message or an answer; a click shows the previous/next one. */
  versionControl(messageId, versions) {
    const box = el("span", "versions");
    box.setAttribute("role", "group");
    box.setAttribute("aria-label", `Version ${versions.index} of ${versions.count}`);
    box.dataset.group = String(versions.ids[0]);
    const go = (n, which) => this.hooks.onSelectVersion?.(Number(messageId), n, box.dataset.group, which);
    const prev = actionButton("‹", "version-prev", "Previous version", () => go(versions.index - 1, "prev"));
    prev.setAttribute("aria-label", "Previous version");
    prev.disabled = versions.index <= 1;
    const next = actionButton("›", "version-next", "Next version", () => go(versions.index + 1, "next"));
    next.setAttribute("aria-label", "Next version");
    next.disabled = versions.index >= versions.count;
    box.append(prev, el("span", "version-label", `${versions.index}/${versions.count}`), next);
    return box;
  }

  /** After a version was chosen: the chat as the server now shows it, the same control focused. */
  showVersion(rows, hasMore, group, which) {
    this.loadHistory(rows, hasMore);
    const box = this.list.querySelector(`.versions[data-group="${CSS.escape(String(group))}"]`);
    if (!box) return;
    const buttons = [...box.querySelectorAll("button")];
    const button = buttons.find((b) => b.classList.contains(`version-${which}`) && !b.disabled) || buttons.find((b) => !b.disabled);
    button?.focus({ preventScroll: true });
    box.scrollIntoView({ block: "nearest" });
    this.pinned = this.nearBottom();
  }

  /** Copy under an answer, and Regenerate (Retry after an error or a stop) on the last one;
   * "‹ n/m ›" when the answer was regenerated. */
  decorateTurn(turn) {
    turn.querySelector(":scope > .msg-actions")?.remove();
    const bar = el("div", "msg-actions");
    if (turn.versions) bar.append(this.versionControl(turn.versions.id, turn.versions));
    const answer = () => [...turn.querySelectorAll(":scope > .bubble.assistant")].map((b) => b.source || b.textContent).join("\n\n");
    if (turn.querySelector(":scope > .bubble.assistant")) {
      bar.append(actionButton("Copy", "copy-message", "Copy this answer (Markdown)", (e) => this.copy(e.currentTarget, answer())));
    }
    const failed = turn.querySelector(":scope > .error-box, :scope > .status-badge");
    const label = failed ? "Retry" : "Regenerate";
    bar.append(actionButton(label, `regen${failed ? " retry" : ""}`, failed ? "Try this answer again" : "Answer the last message again", () => this.regenerate()));
    this.hooks.decorateAnswer?.(turn, bar);
    bar.append(timeStamp(turn));
    turn.append(bar);
    return turn;
  }

  copy(button, text) {
    copyText(text || "").then(() => {
      button.textContent = "Copied";
      setTimeout(() => (button.textContent = "Copy"), 1200);
    });
  }

  regenerate() {
    if (this.run && !this.run.done) return;
    if (this.idsPending) {
      // Retry pressed before the re-fetch after the run: the turn it replaces has no ids yet, so
      // history_rewound could not find it (its error box stayed beside the new answer). It goes
      // once the ids are in (idsSettled).
      this.regenAfterIds = true;
      return;
    }
    if (this.hooks.onRegenerate() !== false) {
      this.localStart = true;
      this.onRunState(true);
    }
  }

  startEdit(node) {
    if (this.run && !this.run.done) return;
    if (node.classList.contains("editing")) {
      node.querySelector(".edit-input")?.focus();
      return;
    }
    this.closeEdit?.(); // one edit at a time: a second Edit closes the first form
    const id = node.dataset.messageId;
    if (!id) {
      this.onToast("This message is still being saved; try again in a moment.");
      return;
    }
    const bubble = node.querySelector(".user-bubble");
    const form = el("form", "edit-form");
    const area = el("textarea", "edit-input");
    area.value = node.source;
    area.rows = Math.min(12, Math.max(2, node.source.split("\n").length + 1));
    area.setAttribute("aria-label", "Edit your message");
    const save = el("button", "primary save", "Save and send");
    save.type = "submit";
    const cancel = actionButton("Cancel", "cancel", "", () => close(true));
    const buttons = el("div", "edit-buttons");
    buttons.append(cancel, save);
    form.append(area, buttons);
    const close = (focusBack = false) => {
      form.remove();
      bubble.hidden = false;
      node.classList.remove("editing");
      if (this.closeEdit === close) this.closeEdit = null;
      if (focusBack) node.querySelector("button.edit")?.focus({ preventScroll: true }); // keyboard users stay put
    };
    this.closeEdit = close;
    form.addEventListener("submit", (e) => {
      e.preventDefault();
      const content = area.value.trim();
      if (!content && !(node.images || []).length) return;
      if (this.hooks.onEdit(Number(id), content + (node.attached || "")) === false) return;
      this.localStart = true;
      this.onRunState(true);
      close();
    });
    area.addEventListener("keydown", (e) => {
      if (e.key === "Escape") {
        e.stopPropagation();
        close(true);
      } else if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
        e.preventDefault();
        form.requestSubmit();
      }
    });
    bubble.hidden = true;
    node.classList.add("editing");
    node.insertBefore(form, bubble.nextSibling);
    area.focus();
  }

  /** The fetched rows as groups. While older rows wait on the server, the rows before the
   * first user message may answer a message on the older page: they wait for it. */
  grouped() {
    if (!this.hasMore) return groupRows(this.rows);
    const first = this.rows.findIndex((r) => r.role === "user");
    return groupRows(first < 0 ? [] : this.rows.slice(first));
  }

  /** The newest page again (after a run): it replaces the rows it overlaps. */
  mergeNewest(rows, hasMore) {
    const at = rows.length ? this.rows.findIndex((r) => r.id === rows[0].id) : -1;
    if (at < 0) {
      this.rows = rows;
      this.hasMore = hasMore;
    } else {
      this.rows = this.rows.slice(0, at).concat(rows);
    }
  }

  /** The page before the oldest fetched row, then render on from where it stopped. */
  fetchOlder() {
    // One fetch at a time; a caller that must wait for the rows (reveal) awaits the same one.
    if (!this.fetching) this.olderFetch = this.fetchOlderNow();
    return this.olderFetch;
  }

  async fetchOlderNow() {
    if (this.fetching || !this.hasMore || !this.rows.length || !this.hooks.loadOlder) return;
    const historyId = this.historyId;
    this.fetching = true;
    this.sentinel.textContent = "Loading older messages…";
    let page;
    try {
      page = await this.hooks.loadOlder(this.rows[0].id);
    } catch {
      this.sentinel.textContent = "Could not load older messages; scroll to retry.";
      return;
    } finally {
      if (historyId === this.historyId) this.fetching = false;
    }
    if (historyId !== this.historyId || !page) return;
    const before = this.groups.length;
    this.rows = page.messages.concat(this.rows);
    this.hasMore = page.has_more;
    this.groups = this.grouped();
    this.firstRendered += this.groups.length - before;
    this.renderOlder();
  }

  /** After a run: learn the ids of what it saved (Edit needs them) without redrawing.
   * rows: the newest page of the chat. */
  assignIds(rows, hasMore = false) {
    this.mergeNewest(rows, hasMore);
    queueMicrotask(() => this.idsSettled());
    const groups = this.grouped();
    const nodes = [...this.list.children].filter((n) => n.classList.contains("group"));
    let g = groups.length - 1;
    for (let n = nodes.length - 1; n >= 0 && g >= 0; n -= 1, g -= 1) {
      const node = nodes[n];
      const group = groups[g];
      if (!!group.user !== node.classList.contains("user")) break;
      if (group.user) {
        node.dataset.messageId = group.user.id;
        this.setUserVersions(node, group.user.versions);
      } else {
        node.dataset.ids = group.rows.map((r) => r.id).join(",");
        const versions = turnVersions(group.rows);
        if (versions || node.versions) {
          node.versions = versions;
          this.decorateTurn(node);
        }
      }
    }
    this.groups = groups;
    this.firstRendered = Math.max(0, Math.min(this.firstRendered, groups.length - nodes.length));
  }

  /** The re-fetch after a run has landed (or failed, or was not needed): a Retry pressed
   * meanwhile goes now. */
  idsSettled() {
    this.idsPending = false;
    if (this.regenAfterIds) {
      this.regenAfterIds = false;
      this.regenerate();
    }
  }

  /** history_rewound: drop the replaced messages; keep the user bubble to show it again. */
  rewind(f) {
    const removed = new Set((f.removed_ids || []).map(String));
    let user = null;
    let count = 0;
    for (const node of [...this.list.children]) {
      const ids = node.dataset.messageId ? [node.dataset.messageId] : (node.dataset.ids || "").split(",").filter(Boolean);
      if (!ids.some((id) => removed.has(id))) continue;
      if (node.classList.contains("user") && !user) user = node;
      node.remove();
      count += 1;
    }
    // A turn drawn live after the last re-fetch has no ids yet: it answered the removed message.
    const last = this.list.lastElementChild;
    if (count && last?.classList.contains("turn") && !last.dataset.ids) last.remove();
    return { user, count };
  }

  renderOlder(initial = false) {
    if (this.firstRendered === 0) {
      if (this.hasMore) {
        this.fetchOlder();
        return;
      }
      this.sentinel.textContent = this.groups.length ? "Start of the conversation" : "";
      return;
    }
    const start = Math.max(0, this.firstRendered - PAGE);
    const fragment = document.createDocumentFragment();
    const nodes = this.groups.slice(start, this.firstRendered).map((group) => this.renderGroup(group));
    // Laid out for real once: a .group off screen counts as its last remembered size (CSS
    // content-visibility), 120px when it never had one, so the first sight of a prepended group
    // would move what is on screen. After a frame they are remembered and may be skipped again.
    for (const node of nodes) node.style.contentVisibility = "visible";
    fragment.append(...nodes);
    requestAnimationFrame(() => requestAnimationFrame(() => {
      for (const node of nodes) node.style.contentVisibility = "";
    }));
    const before = this.scroller.scrollHeight;
    const top = this.scroller.scrollTop;
    this.list.prepend(fragment);
    this.firstRendered = start;
    this.sentinel.textContent = start || this.hasMore ? "Loading older messages…" : "Start of the conversation";
    if (!initial) this.scroller.scrollTop = top + (this.scroller.scrollHeight - before);
    // Still near the top (short messages)? Keep filling on the next frame.
    requestAnimationFrame(() => {
      const more = this.firstRendered > 0 || this.hasMore;
      if (more && this.scroller.scrollTop < 800 && this.scroller.scrollHeight > this.scroller.clientHeight) {
        this.renderOlder();
      }
    });
  }

  nearBottom() {
    const s = this.scroller;
    return s.scrollHeight - s.scrollTop - s.clientHeight < 120;
  }

  /** Show message `messageId` (a search hit): render or fetch older pages until it is drawn,
   * scroll it to the middle and highlight the query's words in it. False when it is not there. */
  async reveal(messageId, query) {
    const id = String(messageId);
    const find = () => [...this.list.children].find(
      (n) => n.dataset.messageId === id || (n.dataset.ids || "").split(",").includes(id));
    for (let i = 0; i < 200 && !find(); i += 1) {
      if (this.firstRendered > 0) this.renderOlder();
      else if (this.hasMore) await this.fetchOlder();
      else break;
    }
    const node = find();
    if (!node) return false;
    this.pinned = false;
    node.scrollIntoView({ block: "center" });
    node.classList.add("search-hit");
    setTimeout(() => node.classList.remove("search-hit"), 4000);
    highlightWords(node, query || "");
    return true;
  }

  /** Stick to the end: the pinned state, or the reader is at the bottom anyway. */
  atEnd() {
    return this.pinned || this.nearBottom();
  }

  scrollToBottom() {
    this.scroller.scrollTop = this.scroller.scrollHeight;
  }

  /** New content arrived: follow it when the reader is at the bottom, else offer the jump button. */
  follow(stick) {
    if (stick) this.scrollToBottom();
    else this.jump.hidden = false;
  }

  append(node) {
    const stick = this.atEnd();
    this.list.append(node);
    this.follow(stick);
  }

  addUserMessage(content, images, files, resources = []) {
    this.localStart = true;
    this.lastUserText = null;
    this.tail = [];
    this.list.append(this.decorateUser(userBubble(content, images, files, resources)));
    this.scrollToBottom(); // your own send always goes to the bottom
    this.jump.hidden = true;
  }

  showError(message) {
    this.append(errorBox(message));
  }

  /** Stop was pressed: say so until stream_stopped arrives. */
  stopping() {
    if (!this.run || this.run.done) return;
    this.run.stopping = true;
    this.run.tick();
  }

  // --- live frames -------------------------------------------------------------------------
  frame(f) {
    if (!f.run_id) {
      if (f.type !== "error") return;
      // A socket-level error (a refused edit, an answer to a closed approval) is a toast; it
      // ends nothing that is running, and a request that never started leaves the view as it was.
      this.onToast(f.message);
      if (this.run && !this.run.done) {
        for (const card of this.run.approvals.values()) reopenApproval(card);
      } else {
        // Our own message was refused before a run began (e.g. its MCP server is down): its
        // bubble goes and the message comes back to the box, to fix and send again.
        if (this.localStart) {
          const last = this.list.lastElementChild;
          if (last?.classList.contains("user") && !last.dataset.messageId) last.remove();
          this.hooks.onRefused?.();
        }
        this.localStart = false;
        this.onRunState(false);
      }
      return;
    }
    if (f.type === "session_titled") {
      this.hooks.onTitle(f.title);
      return;
    }
    if (!this.run || this.run.id !== f.run_id) this.beginRun(f);
    const stick = this.atEnd();
    const before = this.list.scrollHeight;
    this.apply(this.run, f);
    if (TERMINAL.has(f.type) && !this.run.done) {
      this.run.done = true;
      for (const card of this.run.approvals.values()) resolveApproval(card, f.type === "stream_stopped" ? "stopped" : "ended");
      this.closeText(this.run);
      this.run.tick();
      this.decorateTurn(this.run.el);
      this.onRunState(false);
      this.idsPending = true; // until the re-fetch after the run (onRunEnd) names the rows it saved
      this.onRunEnd(this.run, f);
    } else if (!this.run.done) {
      this.run.tick();
    }
    if (this.list.scrollHeight !== before || f.type === "stream_delta") this.follow(stick);
  }

  beginRun(f) {
    const rewound = f.type === "history_rewound" ? this.rewind(f) : null;
    if (rewound && (rewound.count || this.localStart)) {
      // An edit or a regenerate: the replaced messages went; stream_start brings the user message.
      this.rewoundUser = rewound.user;
      this.lastUserText = null;
    } else if (f.seq === 1 && !this.localStart) {
      // A run started elsewhere (another tab, a reload). stream_start names its user message:
      // if the history already ends with it, the rows after it are this run's partial output
      // and the replay redraws them; otherwise the run is newer than the history we loaded.
      const known = f.user_message !== undefined && this.lastUserText === f.user_message;
      if (known || f.user_message === undefined) {
        for (const node of this.tail) node.remove();
      } else {
        this.append(this.decorateUser(userBubble(f.user_message)));
      }
      this.lastUserText = null;
    }
    this.tail = [];
    this.run = new RunView(f.run_id, this.list);
    this.run.foreign = !this.localStart;
    // A replay after a reload: the history already shows the rewound state (handled above).
    this.run.rewound = rewound && (rewound.count || this.run.foreign === false) ? f.mode : null;
    this.localStart = false;
    this.onRunState(true);
  }

  apply(run, f) {
    const sub = !!f.is_subagent;
    switch (f.type) {
      case "stream_start":
        if (run.rewound) {
          // The (edited) user message, before this run's output.
          const old = this.rewoundUser;
          const node = run.rewound === "regenerate" && old ? old : this.decorateUser(userBubble(f.user_message, old?.images || []));
          delete node.dataset.messageId; // a new row: its id comes with the re-fetch after the run
          this.list.insertBefore(node, run.el);
          this.rewoundUser = null;
        }
        run.setPhase(this.hooks.planMayCome(f.user_message) ? "Planning…" : "Waiting for the model…");
        break;
      case "thinking_delta":
        if (!run.thinking) {
          this.closeText(run);
          run.thinking = { node: thinkingBlock("", true), value: "" };
          run.el.append(run.thinking.node);
        }
        run.thinking.value += f.delta;
        run.thinking.node.querySelector(".thinking-body").textContent = run.thinking.value;
        break;
      case "thinking_end":
        if (run.thinking) closeThinking(run.thinking.node);
        run.thinking = null;
        break;
      case "turn_thinking":
        if (run.thinking && !sub) {
          closeThinking(run.thinking.node, f.thinking);
        } else {
          const block = thinkingBlock(f.thinking, false);
          closeThinking(block);
          run.target(sub).append(block);
        }
        run.thinking = null;
        break;
      case "plan_ready":
        run.el.append(planCard(f.plan));
        run.setPhase("Waiting for the model…");
        break;
      case "stream_delta":
        if (sub) {
          // A sub-agent's answer as it streams, in its spawn_agent card (the card's result keeps it).
          if (!run.subText) run.target(true).append((run.subText = el("div", "subagent-text")));
          run.subText.textContent += f.delta;
          break;
        }
        if (run.thinking) closeThinking(run.thinking.node);
        run.thinking = null;
        if (!run.text) {
          run.text = { node: assistantBubble("", true), value: "" };
          run.el.append(run.text.node);
        }
        run.text.value += f.delta;
        run.text.node.source = run.text.value;
        this.queueText(run);
        break;
      case "tool_started": {
        this.closeText(run);
        if (sub) run.subText = null; // the sub-agent's next text goes after this card
        const card = toolCard(f.tool, f.args);
        card.dataset.sub = sub ? "1" : "";
        run.target(sub).append(card);
        run.pending.push(card);
        if (f.tool === "spawn_agent" && !sub) run.spawn = card;
        break;
      }
      case "tool_progress": {
        // The newest running card of that tool (an MCP server's progress notifications).
        const card = run.pending.findLast((c) => c.dataset.tool === f.tool && (c.dataset.sub === "1") === sub);
        if (card) setToolProgress(card, f.progress, f.total, f.message);
        break;
      }
      case "tool_call": {
        const idx = run.pending.findIndex((c) => c.dataset.tool === f.tool && (c.dataset.sub === "1") === sub);
        let card;
        if (idx >= 0) [card] = run.pending.splice(idx, 1);
        else run.target(sub).append((card = toolCard(f.tool, f.args)));
        completeToolCard(card, f.result, f.success);
        if (card === run.spawn) {
          run.spawn = null;
          run.subText = null;
        }
        this.closeText(run);
        if (!sub) run.setPhase("Waiting for the model…");
        break;
      }
      case "approval_required":
        this.showApproval(run, f);
        break;
      case "approval_resolved": {
        const card = run.approvals.get(String(f.approval_id));
        if (card) resolveApproval(card, f.decision, f.remember === "session");
        const tool = run.pending.find((c) => c.dataset.approvalId === String(f.approval_id));
        if (tool) setToolStatus(tool, f.decision === "approve" ? "running…" : "declined");
        break;
      }
      case "stream_end":
        if (f.content && run.text) {
          run.text.value = f.content;
          run.text.node.source = f.content;
        } else if (f.content && !run.text && !run.el.querySelector(".bubble.assistant")) {
          run.text = { node: assistantBubble(f.content), value: f.content };
          run.el.append(run.text.node);
        }
        if (Array.isArray(f.sources) && f.sources.length && !run.el.querySelector(":scope > .sources")) run.el.append(sourceChips(f.sources));
        this.onContext(f.context_tokens, f.max_context_tokens);
        break;
      case "stream_stopped":
        for (const card of run.pending) completeToolCard(card, "stopped before it finished", false);
        run.pending = [];
        if (run.thinking) closeThinking(run.thinking.node);
        run.el.append(statusBadge("stopped"));
        run.el.classList.add("stopped");
        run.el.querySelector(".bubble.assistant.streaming")?.classList.remove("streaming");
        break;
      case "error":
        run.el.append(errorBox(f.message));
        break;
      case "context_compressed":
        run.el.append(notice(`Context compressed: ${f.messages_before} → ${f.messages_after} messages in the model's context`, "compressed"));
        break;
      case "profile_switched":
        run.el.append(notice(`Switched to profile ${f.profile_name || f.profile_id}`, "profile"));
        break;
      case "memory_saved":
        run.el.append(notice(`Remembered (${f.category}) ${f.key}: ${f.value}`, "memory"));
        break;
      case "file_published":
        run.el.append(publishedFile(f));
        break;
      default:
        break;
    }
  }

  showApproval(run, f) {
    const id = String(f.approval_id);
    if (run.approvals.has(id)) return;
    const sub = !!f.is_subagent;
    const card = approvalCard(f, this.onApproval);
    run.approvals.set(id, card);
    // Right after the pending tool card of that call (the newest one of that tool not yet asked about).
    const tool = [...run.pending].reverse().find((c) => c.dataset.tool === f.tool && (c.dataset.sub === "1") === sub && !c.dataset.approvalId);
    if (tool) {
      tool.dataset.approvalId = id;
      setToolStatus(tool, "awaiting approval");
      tool.after(card);
    } else {
      run.target(sub).append(card);
    }
    // A sub-agent's card sits inside its collapsed spawn_agent card: open the way to it.
    for (let d = card.parentElement.closest("details"); d; d = d.parentElement.closest("details")) d.open = true;
    announceApproval(card, f);
  }

  queueText(run) {
    if (this.renderQueued) return;
    this.renderQueued = true;
    requestAnimationFrame(() => {
      this.renderQueued = false;
      const stick = this.atEnd();
      this.flushText(run);
      if (stick) this.scrollToBottom();
    });
  }

  flushText(run) {
    if (run.text) renderMarkdown(run.text.node, run.text.value);
  }

  closeText(run) {
    if (!run.text) return;
    this.flushText(run);
    run.text.node.classList.remove("streaming");
    run.text = null;
  }
}
