// The conversation view: history from REST (paged: only the newest groups are rendered, older
// ones as the reader scrolls up) and live runs from WebSocket frames.
import { announceApproval, approvalCard, reopenApproval, resolveApproval } from "./approvals.js";
import { renderMarkdown } from "./markdown.js";
import {
  closeThinking, completeToolCard, el, errorBox, notice, planCard, publishedFile, setToolStatus,
  statusBadge, subagentList, thinkingBlock, toolCard, userBubble,
} from "./cards.js";

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

function renderTurnRows(rows) {
  const turn = el("div", "group turn");
  const cards = new Map();
  for (const row of rows) {
    if (row.role === "assistant" && row.name === "plan") {
      turn.append(planCard(row.content));
      continue;
    }
    if (row.role === "assistant") {
      if (row.thinking) {
        const t = thinkingBlock(row.thinking, false);
        closeThinking(t);
        turn.append(t);
      }
      if (row.content) {
        const text = el("div", "bubble assistant markdown");
        renderMarkdown(text, row.content);
        turn.append(text);
      }
      for (const call of row.tool_calls || []) {
        const card = toolCard(call.name, call.arguments);
        cards.set(call.id, card);
        turn.append(card);
      }
      if (row.status === "partial" || row.status === "interrupted") turn.append(statusBadge(row.status));
    } else if (row.role === "tool") {
      let card = cards.get(row.tool_call_id);
      if (!card) turn.append((card = toolCard(row.name || "tool", {})));
      completeToolCard(card, row.content, !String(row.content || "").startsWith("ERROR:"));
    } else if (row.content) {
      turn.append(notice(row.content));
    }
  }
  return turn;
}

function renderGroup(group) {
  return group.user ? userBubble(group.user.content, group.user.images || []) : renderTurnRows(group.rows);
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
  }

  target(isSub) {
    return isSub && this.spawn ? subagentList(this.spawn) : this.el;
  }
}

export class ChatView {
  constructor(scroller, { onRunState, onContext, onRunEnd, onApproval, onToast }) {
    this.scroller = scroller;
    this.list = el("div", "messages");
    this.sentinel = el("div", "older");
    scroller.replaceChildren(this.sentinel, this.list);
    this.onRunState = onRunState;
    this.onContext = onContext;
    this.onRunEnd = onRunEnd;
    this.onApproval = onApproval;
    this.onToast = onToast;
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
  }

  // --- history -------------------------------------------------------------------------
  loadHistory(rows) {
    this.groups = groupRows(rows);
    this.firstRendered = this.groups.length;
    this.list.replaceChildren();
    this.run = null;
    this.renderOlder(true);
    const lastUser = this.groups.map((g) => !!g.user).lastIndexOf(true);
    this.lastUserText = lastUser >= 0 ? this.groups[lastUser].user.content || "" : null;
    this.tail = lastUser >= 0 ? [...this.list.children].slice(lastUser - this.firstRendered + 1) : [];
    this.scrollToBottom();
  }

  renderOlder(initial = false) {
    if (this.firstRendered === 0) {
      this.sentinel.textContent = this.groups.length ? "Start of the conversation" : "";
      return;
    }
    const start = Math.max(0, this.firstRendered - PAGE);
    const fragment = document.createDocumentFragment();
    for (const group of this.groups.slice(start, this.firstRendered)) fragment.append(renderGroup(group));
    const before = this.scroller.scrollHeight;
    const top = this.scroller.scrollTop;
    this.list.prepend(fragment);
    this.firstRendered = start;
    this.sentinel.textContent = start ? "Loading older messages…" : "Start of the conversation";
    if (!initial) this.scroller.scrollTop = top + (this.scroller.scrollHeight - before);
    // Still near the top (short messages)? Keep filling on the next frame.
    requestAnimationFrame(() => {
      if (this.firstRendered > 0 && this.scroller.scrollTop < 800 && this.scroller.scrollHeight > this.scroller.clientHeight) {
        this.renderOlder();
      }
    });
  }

  nearBottom() {
    const s = this.scroller;
    return s.scrollHeight - s.scrollTop - s.clientHeight < 120;
  }

  scrollToBottom() {
    this.scroller.scrollTop = this.scroller.scrollHeight;
  }

  append(node) {
    const stick = this.nearBottom();
    this.list.append(node);
    if (stick) this.scrollToBottom();
  }

  addUserMessage(content, images, files) {
    this.localStart = true;
    this.lastUserText = null;
    this.tail = [];
    this.append(userBubble(content, images, files));
  }

  showError(message) {
    this.append(errorBox(message));
  }

  // --- live frames -------------------------------------------------------------------------
  frame(f) {
    if (!f.run_id) {
      if (f.type !== "error") return;
      if (this.run && !this.run.done) {
        // A socket-level error during a run (e.g. an answer to an approval that is already
        // closed) does not end the run.
        this.onToast(f.message);
        for (const card of this.run.approvals.values()) reopenApproval(card);
      } else {
        this.showError(f.message);
        this.onRunState(false);
      }
      return;
    }
    if (!this.run || this.run.id !== f.run_id) this.beginRun(f);
    const stick = this.nearBottom();
    this.apply(this.run, f);
    if (TERMINAL.has(f.type) && !this.run.done) {
      this.run.done = true;
      for (const card of this.run.approvals.values()) resolveApproval(card, f.type === "stream_stopped" ? "stopped" : "ended");
      this.closeText(this.run);
      this.onRunState(false);
      this.onRunEnd(this.run, f);
    }
    if (stick) this.scrollToBottom();
  }

  beginRun(f) {
    if (f.seq === 1 && !this.localStart) {
      // A run started elsewhere (another tab, a reload). stream_start names its user message:
      // if the history already ends with it, the rows after it are this run's partial output
      // and the replay redraws them; otherwise the run is newer than the history we loaded.
      const known = f.user_message !== undefined && this.lastUserText === f.user_message;
      if (known || f.user_message === undefined) {
        for (const node of this.tail) node.remove();
      } else {
        this.append(userBubble(f.user_message));
      }
      this.lastUserText = null;
    }
    this.tail = [];
    this.run = new RunView(f.run_id, this.list);
    this.run.foreign = !this.localStart;
    this.localStart = false;
    this.onRunState(true);
  }

  apply(run, f) {
    const sub = !!f.is_subagent;
    switch (f.type) {
      case "stream_start":
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
        break;
      case "stream_delta":
        if (run.thinking) closeThinking(run.thinking.node);
        run.thinking = null;
        if (!run.text) {
          run.text = { node: el("div", "bubble assistant markdown streaming"), value: "" };
          run.el.append(run.text.node);
        }
        run.text.value += f.delta;
        this.queueText(run);
        break;
      case "tool_started": {
        this.closeText(run);
        const card = toolCard(f.tool, f.args);
        card.dataset.sub = sub ? "1" : "";
        run.target(sub).append(card);
        run.pending.push(card);
        if (f.tool === "spawn_agent" && !sub) run.spawn = card;
        break;
      }
      case "tool_call": {
        const idx = run.pending.findIndex((c) => c.dataset.tool === f.tool && (c.dataset.sub === "1") === sub);
        let card;
        if (idx >= 0) [card] = run.pending.splice(idx, 1);
        else run.target(sub).append((card = toolCard(f.tool, f.args)));
        completeToolCard(card, f.result, f.success);
        if (card === run.spawn) run.spawn = null;
        this.closeText(run);
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
        if (f.content && run.text) run.text.value = f.content;
        else if (f.content && !run.text && !run.el.querySelector(".bubble.assistant")) {
          run.text = { node: el("div", "bubble assistant markdown"), value: f.content };
          run.el.append(run.text.node);
        }
        this.onContext(f.context_tokens, f.max_context_tokens);
        break;
      case "stream_stopped":
        for (const card of run.pending) completeToolCard(card, "stopped before it finished", false);
        run.pending = [];
        if (run.thinking) closeThinking(run.thinking.node);
        run.el.append(statusBadge("stopped"));
        run.el.classList.add("stopped");
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
      const stick = this.nearBottom();
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
