// Voice in the chat: "Speak" records (click to start and stop, or hold to talk; a level meter and
// the time; Esc cancels) and puts the transcript in the box, or sends it at once (a setting);
// "Read aloud" under each answer, and auto-read as an answer streams (sentence by sentence, Stop
// at any moment); "Talk" is the hands-free conversation: speak → the answer is read → Navi
// listens again, and speaking while it reads stops the reading (barge-in).
import { csrfToken } from "./api.js";
import { el } from "./cards.js";
import { fetchLog, playLog } from "./voice-player.js";
import { AnswerReader } from "./voice-reading.js";
import { Recorder, SpeechDetector, microphoneProblem, recordingSupported } from "./voice-recorder.js";

const HOLD_MS = 350; // a press longer than this is "hold to talk": releasing it sends
const IDLE_RESTART_S = 30; // hands-free: a recording with no speech in it starts over
const HOW_TO = {
  stt: "Speaking needs a speech-to-text server (Speaches, LocalAI, or any server with the OpenAI audio API).",
  tts: "Reading aloud needs a text-to-speech server (Kokoro-FastAPI, openedai-speech, LocalAI…).",
};
const MIC_TITLE = "Speak: click to start and again to finish, or hold while you talk (Esc cancels)";
const TALK_TITLE = "Conversation: speak, hear the answer, speak again — hands-free";
const STATES = {
  recording: "Recording", transcribing: "Transcribing…", listening: "Listening…", hearing: "Hearing you…",
  thinking: "Thinking…", speaking: "Speaking…", reading: "Reading aloud…",
};

async function jsonRequest(method, path, body) {
  const headers = { Accept: "application/json" };
  const init = { method, headers, credentials: "same-origin" };
  if (method !== "GET") headers["X-CSRFToken"] = csrfToken();
  if (body instanceof FormData) init.body = body;
  const response = await fetch(path, init);
  const data = await response.json().catch(() => ({}));
  if (!response.ok) throw new Error(data.error || `${method} ${path} failed with HTTP ${response.status}`);
  return data;
}

function clock(seconds) {
  const s = Math.floor(seconds);
  return `${Math.floor(s / 60)}:${String(s % 60).padStart(2, "0")}`;
}

function micIcon() {
  const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
  svg.setAttribute("viewBox", "0 0 16 16");
  svg.setAttribute("width", "14");
  svg.setAttribute("height", "14");
  svg.setAttribute("aria-hidden", "true");
  svg.setAttribute("class", "mic-icon");
  const path = document.createElementNS("http://www.w3.org/2000/svg", "path");
  path.setAttribute("d", "M8 1.5a2 2 0 0 1 2 2v4a2 2 0 0 1-4 0v-4a2 2 0 0 1 2-2z M4 7.5a4 4 0 0 0 8 0 M8 11.5v3");
  path.setAttribute("fill", "none");
  path.setAttribute("stroke", "currentColor");
  path.setAttribute("stroke-width", "1.4");
  path.setAttribute("stroke-linecap", "round");
  svg.append(path);
  return svg;
}

export class Voice {
  /** hooks: getSession() → id, onError(text), onInfo(text). */
  constructor(form, composer, hooks) {
    this.form = form;
    this.composer = composer;
    this.hooks = hooks;
    this.settings = { stt: { configured: false }, tts: { configured: false }, max_seconds: 300 };
    this.recorder = new Recorder();
    this.detector = new SpeechDetector();
    this.mode = "idle"; // idle, recording, transcribing, or the conversation's states
    this.conversation = false;
    this.bargeIns = 0;
    this.reader = new AnswerReader({
      onState: (state) => this.readingState(state),
      onError: (message, status) => this.hooks.onError(status === 503 ? message : `Reading aloud failed: ${message}`),
      onDone: () => this.conversation && this.setMode("listening"),
      problem: () => this.missing("tts"),
      explain: (problem) => this.explain(problem),
    });
    this.build();
    window.naviVoice = { fetchLog, playLog, voice: this };
    this.load();
    window.addEventListener("focus", () => this.load());
  }

  // --- the page's pieces ------------------------------------------------------------------
  build() {
    const row = this.form.querySelector(".row");
    const send = this.form.querySelector("#send"); // after the box, beside Send: the box keeps its place in the tab order
    this.mic = el("button", "attach mic");
    this.mic.type = "button";
    this.mic.id = "mic-button";
    this.mic.setAttribute("aria-pressed", "false");
    this.mic.title = MIC_TITLE;
    this.mic.append(micIcon(), el("span", "", "Speak"));
    this.talk = el("button", "attach talk", "Talk");
    this.talk.type = "button";
    this.talk.id = "talk-button";
    this.talk.setAttribute("aria-pressed", "false");
    this.talk.title = TALK_TITLE;
    row.insertBefore(this.mic, send);
    row.insertBefore(this.talk, send);

    this.panel = el("div", "voice-panel");
    this.panel.id = "voice-panel";
    this.panel.hidden = true;
    this.status = el("span", "voice-state");
    this.status.setAttribute("role", "status");
    this.meter = el("span", "voice-meter");
    this.meter.setAttribute("aria-hidden", "true");
    this.meterBar = el("span");
    this.meter.append(this.meterBar);
    this.time = el("span", "voice-time");
    this.hint = el("span", "voice-hint");
    this.finishButton = el("button", "voice-finish primary", "Done");
    this.finishButton.type = "button";
    this.cancelButton = el("button", "voice-cancel", "Cancel");
    this.cancelButton.type = "button";
    this.panel.append(this.status, this.meter, this.time, this.hint, this.finishButton, this.cancelButton);
    this.form.insertBefore(this.panel, row);

    this.mic.addEventListener("pointerdown", (e) => this.pressMic(e));
    this.mic.addEventListener("pointerup", () => this.releaseMic());
    this.mic.addEventListener("click", () => this.clickMic());
    this.talk.addEventListener("click", () => (this.conversation ? this.leave() : this.enter()));
    this.finishButton.addEventListener("click", () => this.finishRecording());
    this.cancelButton.addEventListener("click", () => this.cancel());
    document.addEventListener("keydown", (e) => this.keys(e), true);
  }

  async load() {
    try {
      this.settings = await jsonRequest("GET", "/settings/voice");
    } catch {
      return; // voice is optional: the chat works without it
    }
    const stt = this.settings.stt.configured;
    this.mic.classList.toggle("unavailable", !stt);
    this.talk.classList.toggle("unavailable", !stt || !this.settings.tts.configured);
    this.mic.title = this.missing("stt") || MIC_TITLE;
    this.talk.title = this.missing("stt", "tts") || TALK_TITLE;
    document.body.dataset.voiceReady = "1";
  }

  /** Why this cannot work now (no server, no microphone), or "" when it can. */
  missing(...needs) {
    for (const need of needs) {
      if (!this.settings[need].configured) {
        const where = this.settings.can_edit ? "Set one up in Settings → Voice." : "The owner sets one up in Settings → Voice.";
        return `${HOW_TO[need]} ${where}`;
      }
    }
    return "";
  }

  explain(problem) {
    this.hooks.onInfo(problem);
  }

  setMode(mode) {
    this.mode = mode;
    document.body.dataset.voice = mode;
    const recording = mode === "recording";
    const live = this.conversation || recording;
    this.panel.hidden = mode === "idle" && !this.conversation;
    this.panel.classList.toggle("conversation", this.conversation);
    this.panel.dataset.mode = mode;
    const label = STATES[mode] || "";
    this.status.textContent = this.conversation ? `Conversation · ${label || "Listening…"}` : label;
    this.meter.hidden = !live;
    this.time.hidden = !recording;
    this.hint.textContent = recording ? "Click Speak again or Done to finish · Esc cancels" : "";
    this.finishButton.hidden = !recording;
    this.cancelButton.textContent = this.conversation ? "Leave conversation" : mode === "reading" ? "Stop reading" : "Cancel";
    this.cancelButton.hidden = !(recording || this.conversation || mode === "reading");
    this.mic.setAttribute("aria-pressed", String(recording));
    this.mic.classList.toggle("active", recording);
    this.talk.setAttribute("aria-pressed", String(this.conversation));
    this.talk.classList.toggle("active", this.conversation);
  }

  // --- speaking: the mic button --------------------------------------------------------------
  pressMic(e) {
    if (e.button !== 0 || this.conversation) return;
    this.downAt = performance.now();
    this.mic.setPointerCapture?.(e.pointerId); // the release counts wherever the finger or pointer ends up
    if ((this.mode === "idle" || this.mode === "reading") && !this.missing("stt")) {
      this.startedByPress = true;
      this.startRecording();
    }
  }

  releaseMic() {
    if (this.startedByPress && this.mode === "recording" && performance.now() - this.downAt > HOLD_MS) {
      this.finishRecording(); // hold to talk: letting go sends
    }
  }

  clickMic() {
    if (this.startedByPress) {
      this.startedByPress = false; // the click that ends the press which started the recording
      return;
    }
    if (this.conversation) return;
    const problem = this.missing("stt");
    if (problem) return this.explain(problem);
    if (this.mode === "recording") this.finishRecording();
    else if (this.mode === "idle" || this.mode === "reading") this.startRecording();
  }

  async startRecording() {
    if (!this.hooks.getSession()) return;
    this.reader.stop();
    this.time.textContent = clock(0);
    this.meterBar.style.width = "0%";
    this.setMode("recording");
    try {
      await this.recorder.open();
    } catch (err) {
      this.setMode("idle");
      this.hooks.onError(microphoneProblem(err));
      return;
    }
    if (this.mode !== "recording") {
      this.recorder.close(); // cancelled (or let go) while the browser asked for permission
      return;
    }
    this.recorder.start();
    this.tick();
  }

  /** The meter and the clock while recording; in a conversation, speech and silence too. */
  tick(loop = (this.loop = (this.loop || 0) + 1)) {
    if (loop !== this.loop || !this.recorder.recording) return;
    const level = this.recorder.level();
    this.meterBar.style.width = `${Math.min(100, Math.round(level * 400))}%`;
    const elapsed = this.recorder.elapsed();
    this.time.textContent = clock(elapsed);
    if (this.conversation) this.listen(level, elapsed);
    else if (elapsed >= this.settings.max_seconds) this.finishRecording();
    requestAnimationFrame(() => this.tick(loop));
  }

  async finishRecording() {
    if (this.mode !== "recording") return;
    this.setMode("transcribing");
    const file = await this.recorder.stop();
    this.recorder.close();
    const text = await this.transcribe(file);
    this.setMode("idle");
    if (text === null) return;
    if (!text.trim()) return this.explain("Nothing was heard. Speak closer to the microphone, or type.");
    this.deliver(text.trim(), this.settings.send_at_once);
  }

  cancel() {
    if (this.conversation) return this.leave();
    if (this.mode === "reading") return this.reader.stop();
    this.recorder.close();
    this.setMode("idle");
  }

  async transcribe(file) {
    const sessionId = this.hooks.getSession();
    if (!file || !sessionId) return null;
    const form = new FormData();
    form.append("file", file, file.name);
    try {
      return (await jsonRequest("POST", `/sessions/${sessionId}/audio`, form)).text || "";
    } catch (err) {
      this.hooks.onError(`Could not transcribe: ${err.message}`);
      return null;
    }
  }

  /** The transcript into the box to edit, or sent at once. */
  deliver(text, now) {
    const input = this.composer.input;
    input.value = input.value.trim() ? `${input.value.trimEnd()} ${text}` : text;
    this.composer.autosize();
    if (now) this.composer.send();
    else if (!window.matchMedia("(pointer: coarse)").matches) {
      input.focus();
      input.setSelectionRange(input.value.length, input.value.length);
    }
  }

  keys(e) {
    if (e.key !== "Escape") return;
    if (this.conversation || this.mode === "recording") {
      e.preventDefault();
      e.stopPropagation();
      this.cancel();
    } else if (this.reader.active) {
      this.reader.stop(); // and the run too, if one is going (the page's own Esc)
    }
  }

  // --- listening: read aloud and auto-read (voice-reading.js) -------------------------------
  decorate(turn, bar) {
    this.reader.decorate(turn, bar);
  }

  /** How reading aloud goes, shown in the panel (and, in a conversation, what comes next). */
  readingState(state) {
    const reading = state !== "idle";
    if (this.conversation) {
      if (state === "speaking") this.setMode("speaking");
      else if (state === "idle" && this.mode === "speaking") {
        this.freshRecording(true); // the reading may echo in the recording: it is never sent as input
        this.setMode("listening");
      }
    } else if (this.mode === "idle" || this.mode === "reading") {
      this.setMode(reading ? "reading" : "idle");
    }
  }

  /** Frames of the open chat: this tab's answers are read as they stream when auto-read is on,
   * or in a conversation. */
  frame(f, run) {
    this.reader.follow(f, run, this.settings.auto_read || this.conversation);
    if (this.conversation && (f.type === "stream_stopped" || f.type === "error") && run?.id === f.run_id) {
      this.setMode("listening");
    }
  }

  // --- conversation (hands-free) ----------------------------------------------------------
  async enter() {
    const problem = this.missing("stt", "tts");
    if (problem) return this.explain(problem);
    if (!recordingSupported()) return this.hooks.onError(microphoneProblem());
    this.reader.stop();
    this.conversation = true;
    this.setMode("listening");
    try {
      await this.recorder.open();
    } catch (err) {
      this.leave();
      this.hooks.onError(microphoneProblem(err));
      return;
    }
    if (!this.conversation) return;
    this.detector.reset();
    this.recorder.start();
    this.tick();
  }

  leave() {
    this.conversation = false;
    this.recorder.close();
    this.reader.stop();
    this.setMode("idle");
  }

  /** One frame of the microphone in a conversation: speech starts (barge-in while reading), ends. */
  listen(level, elapsed) {
    this.detector.strict = this.reader.speaking; // its own voice from the speakers is not speech
    const event = this.detector.update(level * (this.detector.strict ? 0.5 : 1), performance.now());
    if (event === "speech") {
      if (this.reader.active) {
        this.bargeIns += 1;
        this.reader.stop();
        this.freshRecording(false); // what was recorded under the reading is not the owner's words
      }
      this.setMode("hearing");
    } else if (event === "end" || (this.detector.speaking && elapsed >= this.settings.max_seconds)) {
      this.utteranceDone();
    } else if (!this.detector.speaking && elapsed > IDLE_RESTART_S) {
      this.recorder.cancel();
      this.recorder.start(); // nothing said for a while: start over, keep the recording short
    }
  }

  /** Start the conversation's recording over (its audio so far dropped). */
  freshRecording(resetDetector) {
    if (!this.recorder.recording) return;
    this.recorder.cancel();
    this.recorder.start();
    if (resetDetector) this.detector.reset();
  }

  async utteranceDone() {
    const file = await this.recorder.stop();
    this.detector.reset();
    if (!this.conversation) return;
    this.recorder.start(); // listening again at once: a barge-in may come while it answers
    this.tick();
    this.setMode("transcribing");
    const text = await this.transcribe(file);
    if (!this.conversation) return;
    if (!text || !text.trim()) {
      this.setMode("listening");
      return;
    }
    this.setMode("thinking");
    this.deliver(text.trim(), true);
  }
}

/** A message that began as a voice note (meta.voice): marked above its text. */
export function voiceMark(node, voice) {
  const label = el("p", "voice-mark");
  label.append(micIcon(), el("span", "", voice.duration_s ? `Voice note · ${clock(voice.duration_s)}` : "Voice note"));
  label.title = voice.source === "telegram" ? "Sent as a voice note from Telegram, transcribed" : "Spoken, transcribed";
  node.prepend(label);
}
