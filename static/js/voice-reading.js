// Answers read aloud: "Read aloud" under each answer (Stop reading on the same button), and an
// answer read as it streams — each sentence handed to the player as soon as it is complete, the
// words before a tool read, its card not — when auto-read is on or a conversation is going.
import { actionButton } from "./cards.js";
import { SentenceStream, sentences, speakable } from "./speech-text.js";
import { SpeechPlayer } from "./voice-player.js";

export class AnswerReader {
  /** hooks: onState(state, tag) after the buttons are updated, onDone(tag), onError(message, status),
   * problem() → why nothing can be read now ("" when it can), explain(problem). */
  constructor(hooks) {
    this.hooks = hooks;
    this.live = null; // {runId, stream, fed}: the answer read as it streams
    this.button = null; // the "Read aloud" button of the answer being read
    this.player = new SpeechPlayer({
      onState: (state, tag) => this.changed(state, tag),
      onError: hooks.onError,
      onDone: hooks.onDone,
    });
  }

  get active() {
    return this.player.active;
  }

  get speaking() {
    return this.player.state === "speaking";
  }

  stop() {
    this.live = null;
    this.player.stop();
  }

  /** "Read aloud" under an answer (chat.js decorateTurn, for history and when a run ends). */
  decorate(turn, bar) {
    if (!turn.querySelector(":scope > .bubble.assistant")) return;
    const button = actionButton("Read aloud", "read-aloud", "Read this answer aloud", () => this.read(turn, button));
    const reading = this.player.tag === turn && this.player.active; // being read as it was written
    button.setAttribute("aria-pressed", String(reading));
    if (reading) {
      button.textContent = "Stop reading";
      this.button = button;
    }
    bar.insertBefore(button, bar.querySelector(":scope > .regen") || null);
  }

  read(turn, button) {
    if (this.player.tag === turn) return this.stop();
    const problem = this.hooks.problem();
    if (problem) return this.hooks.explain(problem);
    const text = [...turn.querySelectorAll(":scope > .bubble.assistant")].map((b) => b.source || b.textContent).join("\n\n");
    this.live = null;
    this.button = button;
    this.player.begin(turn);
    for (const sentence of sentences(speakable(text))) this.player.add(sentence);
    this.player.end();
  }

  changed(state, tag) {
    const reading = state !== "idle";
    if (this.button) {
      const mine = reading && this.player.tag && this.button.isConnected;
      this.button.textContent = mine ? "Stop reading" : "Read aloud";
      this.button.setAttribute("aria-pressed", String(!!mine));
      if (!reading) this.button = null;
    }
    if (tag instanceof Element) tag.classList.toggle("reading", reading);
    this.hooks.onState(state, tag);
  }

  /** A frame of the open chat, after chat.js drew it. `wanted`: read this tab's answers now. */
  follow(f, run, wanted) {
    if (!run || run.id !== f.run_id || f.is_subagent) return;
    if (f.type === "stream_start") {
      this.live = null;
      if (run.foreign || !wanted || this.hooks.problem()) return; // another tab's or a messenger's turn
      this.live = { runId: f.run_id, stream: new SentenceStream(), fed: false };
      this.player.begin(run.el); // the answer being written: marked while read; its "Read aloud" stops it
      return;
    }
    const live = this.live;
    if (!live || live.runId !== f.run_id) return;
    const add = (list) => list.forEach((s) => this.player.add(s));
    if (f.type === "stream_delta") {
      live.fed = true;
      add(live.stream.push(f.delta));
    } else if (f.type === "tool_started") {
      add(live.stream.flush()); // the words before a tool; its card is not read
      live.stream = new SentenceStream();
    } else if (f.type === "stream_end") {
      if (!live.fed && f.content) add(live.stream.push(f.content));
      add(live.stream.flush());
      this.player.end();
      this.live = null;
    } else if (f.type === "stream_stopped" || f.type === "error") {
      this.stop();
    }
  }
}
