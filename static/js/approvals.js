// Approval cards: a tool call that needs the owner's consent shows what it wants to do and
// three answers; the answer goes back as an `approval` client frame and every tab closes its
// card when `approval_resolved` arrives. Arguments and reason are model/server text: textContent only.
import { el, pretty } from "./cards.js";

const OUTCOMES = {
  approve: "Approved",
  remembered: "Always allowed in this chat",
  deny: "Denied",
  timeout: "No answer — timed out",
  stopped: "Cancelled (stopped)",
  ended: "Cancelled (the run ended)",
};

const ANSWERS = [
  { key: "approve", label: "Approve", busy: "Approving…", className: "primary approve" },
  { key: "deny", label: "Deny", busy: "Denying…", className: "deny" },
  { key: "remember", label: "Always in this chat", busy: "Approving…", className: "remember" },
];

function isTyping() {
  // The message box keeps focus during a run (typing then queues): only a draft in it counts.
  const a = document.activeElement;
  if (!a || a.disabled) return false;
  if (a.isContentEditable || a.tagName === "SELECT") return true;
  return ["INPUT", "TEXTAREA"].includes(a.tagName) && a.value.trim() !== "";
}

/**
 * The card for an `approval_required` frame. onAnswer(approvalId, decision, remember) sends
 * the answer and returns false when it could not.
 */
export function approvalCard(frame, onAnswer) {
  const id = String(frame.approval_id);
  const card = el("section", "approval");
  card.dataset.approvalId = id;
  card.dataset.tool = frame.tool;
  card.setAttribute("role", "alertdialog");
  card.setAttribute("aria-modal", "false");
  const titleId = `approval-title-${id}`;
  const reasonId = `approval-reason-${id}`;
  card.setAttribute("aria-labelledby", titleId);
  card.setAttribute("aria-describedby", reasonId);

  const title = el("div", "approval-title");
  title.id = titleId;
  title.append(
    el("span", "approval-icon", "⚠"),
    document.createTextNode(frame.is_subagent ? "A sub-agent wants to run " : "Navi wants to run "),
    el("code", "tool-name", frame.tool),
  );
  title.firstChild.setAttribute("aria-hidden", "true");
  const reason = el("p", "approval-reason", frame.reason ? `Why it asks: ${frame.reason}` : "This tool needs your approval.");
  reason.id = reasonId;
  const args = el("pre", "approval-args", pretty(frame.arguments));
  args.tabIndex = 0; // long arguments scroll: make the box reachable by keyboard
  args.setAttribute("aria-label", "Arguments");

  const actions = el("div", "approval-actions");
  const buttons = ANSWERS.map(({ key, label, busy, className }) => {
    const button = el("button", className, label);
    button.type = "button";
    button.addEventListener("click", () => {
      const decision = key === "deny" ? "deny" : "approve";
      const remember = key === "remember" ? "session" : undefined;
      if (onAnswer(id, decision, remember) === false) return;
      card.dataset.answer = key;
      card.setAttribute("aria-busy", "true");
      for (const b of buttons) b.disabled = true;
      button.textContent = busy;
    });
    actions.append(button);
    return button;
  });
  card.append(title, reason, el("div", "label", "Arguments"), args, actions);
  return card;
}

/** Let the owner answer again (the server refused the answer, e.g. an unknown approval). */
export function reopenApproval(card) {
  if (!card.dataset.answer || card.classList.contains("done")) return;
  delete card.dataset.answer;
  card.removeAttribute("aria-busy");
  card.querySelectorAll(".approval-actions button").forEach((b, i) => {
    b.disabled = false;
    b.textContent = ANSWERS[i].label;
  });
}

/** After the card is in the page: bring it to the owner's attention without stealing typing focus. */
export function announceApproval(card, frame) {
  if (!isTyping()) card.querySelector("button.approve")?.focus();
  notify(card, frame);
}

function notify(card, frame) {
  if (!("Notification" in window) || Notification.permission !== "granted" || !document.hidden) return;
  try {
    const note = new Notification("Navi needs your approval", {
      body: `${frame.tool}${frame.reason ? ` — ${frame.reason}` : ""}`,
      tag: `navi-approval-${frame.approval_id}`, // one notification however many tabs are open
    });
    note.onclick = () => {
      window.focus();
      card.querySelector("button.approve")?.focus();
      note.close();
    };
    card.notification = note;
  } catch {
    // Some browsers only allow notifications from a service worker; the card is enough.
  }
}

/** A past approval in the history (a tool row's meta.approval): the line the live card ended
 * as, with who answered and when. */
export function pastApproval(tool, approval) {
  const card = el("section", "approval done");
  card.dataset.tool = tool;
  const remembered = approval.decision === "approve" && approval.remember === "session";
  const key = remembered ? "remembered" : approval.decision;
  card.dataset.decision = key;
  card.setAttribute("role", "status");
  const icon = el("span", "approval-icon", key === "approve" || key === "remembered" ? "✓" : "✕");
  icon.setAttribute("aria-hidden", "true");
  const at = approval.at ? new Date(approval.at).toLocaleString() : "";
  const who = [approval.by ? `by ${approval.by}` : "", at].filter(Boolean).join(", ");
  card.append(icon, el("span", "approval-outcome", OUTCOMES[key] || approval.decision), el("code", "tool-name", tool));
  if (who) card.append(el("span", "approval-when", who));
  if (approval.reason) card.title = `Why it asked: ${approval.reason}`;
  return card;
}

/** Collapse a card to one line saying how it ended (decision: approve/deny/timeout/stopped/ended). */
export function resolveApproval(card, decision, remembered = false) {
  if (card.classList.contains("done")) return;
  const key = decision === "approve" && (remembered || card.dataset.answer === "remember") ? "remembered" : decision;
  const hadFocus = card.contains(document.activeElement);
  card.notification?.close();
  card.classList.add("done");
  card.dataset.decision = key;
  card.removeAttribute("aria-busy");
  card.setAttribute("role", "status");
  card.removeAttribute("aria-describedby");
  const mark = key === "approve" || key === "remembered" ? "✓" : "✕";
  const icon = el("span", "approval-icon", mark);
  icon.setAttribute("aria-hidden", "true");
  const outcome = el("span", "approval-outcome", OUTCOMES[key] || decision);
  outcome.id = card.getAttribute("aria-labelledby");
  card.replaceChildren(icon, outcome, el("code", "tool-name", card.dataset.tool));
  if (hadFocus) {
    card.tabIndex = -1; // keep keyboard users where they were, on the outcome
    card.focus({ preventScroll: true });
  }
}
