// Reading aloud: sentences go to POST /speech one by one (the next two fetched while one plays),
// each is decoded and played through one AudioContext in order, so the first sentence plays
// while the rest of the answer is still being written. Stop ends it at once.
import { csrfToken } from "./api.js";

const AHEAD = 2; // sentences fetched ahead of the one playing

/** What was asked for ({text, at}) and played ({text, bytes, type, at, state}), for the page's
 * tests and for debugging; the last 200 of each. */
export const fetchLog = [];
export const playLog = [];

function logged(log, entry) {
  log.push(entry);
  if (log.length > 200) log.shift();
}

export class SpeechError extends Error {
  constructor(message, status) {
    super(message);
    this.status = status;
  }
}

export async function fetchSpeech(text, signal) {
  let response;
  try {
    response = await fetch("/speech", {
      method: "POST", credentials: "same-origin", signal,
      headers: { "Content-Type": "application/json", Accept: "audio/*, application/json", "X-CSRFToken": csrfToken() },
      body: JSON.stringify({ text }),
    });
  } catch (err) {
    if (err.name === "AbortError") throw err;
    throw new SpeechError(`cannot reach the Navi server (${err.message})`, 0);
  }
  if (!response.ok) {
    let detail = `speaking failed with HTTP ${response.status}`;
    try {
      detail = (await response.json()).error || detail;
    } catch {
      // not JSON: the status says enough
    }
    throw new SpeechError(detail, response.status);
  }
  return { data: await response.arrayBuffer(), type: response.headers.get("Content-Type") || "" };
}

let sharedContext = null;

/** The page's one AudioContext, resumed (browsers start it suspended until a click or a key). */
export function audioContext() {
  if (!sharedContext) sharedContext = new AudioContext();
  if (sharedContext.state === "suspended") sharedContext.resume().catch(() => {});
  return sharedContext;
}

export class SpeechPlayer {
  /** hooks: onState("waiting" | "speaking" | "idle", tag), onError(message, status), onDone(tag) when a
   * reading ends by itself (not by stop()). */
  constructor(hooks = {}) {
    this.hooks = hooks;
    this.queue = []; // {text, audio: Promise<AudioBuffer>}
    this.source = null;
    this.open = false; // more sentences may come
    this.playing = false;
    this.generation = 0;
    this.abort = new AbortController();
    this.tag = null; // who asked (an answer's turn): the "Read aloud" button shows "Stop reading" on it
  }

  get active() {
    return this.open || this.playing || this.queue.length > 0;
  }

  /** Start a new reading (the previous one stops). */
  begin(tag = null) {
    this.stop();
    this.tag = tag;
    this.open = true;
    this.setState("waiting");
  }

  add(text) {
    if (!text || !text.trim()) return;
    if (!this.open) return; // stopped (Stop, barge-in): the rest of the answer is not read
    this.queue.push({ text, audio: null });
    this.fetchAhead();
    if (!this.playing) this.playNext();
  }

  /** No more sentences: the reading ends after the last one. */
  end() {
    if (!this.open) return; // stopped already
    this.open = false;
    if (!this.playing && !this.queue.length) this.finish(true);
  }

  stop() {
    const wasActive = this.active;
    this.generation += 1;
    this.abort.abort();
    this.abort = new AbortController();
    this.queue = [];
    this.open = false;
    this.playing = false;
    if (this.source) {
      this.source.onended = null;
      try {
        this.source.stop();
      } catch {
        // not started yet
      }
      this.source = null;
    }
    if (wasActive) this.finish(false);
  }

  finish(byItself) {
    this.setState("idle");
    const tag = this.tag;
    this.tag = null;
    if (byItself) this.hooks.onDone?.(tag);
  }

  setState(state) {
    this.state = state;
    document.body.dataset.voiceReading = state;
    this.hooks.onState?.(state, this.tag);
  }

  fetchAhead() {
    const generation = this.generation;
    const ctx = audioContext();
    for (const item of this.queue.slice(0, AHEAD + 1)) {
      if (item.audio) continue;
      logged(fetchLog, { text: item.text, at: performance.now() });
      item.audio = fetchSpeech(item.text, this.abort.signal).then(async ({ data, type }) => {
        const bytes = data.byteLength;
        const buffer = await ctx.decodeAudioData(data);
        return { buffer, bytes, type };
      });
      item.audio.catch((err) => {
        if (generation === this.generation && err.name !== "AbortError") this.fail(err);
      });
    }
  }

  async playNext() {
    const generation = this.generation;
    const item = this.queue[0];
    if (!item) {
      this.playing = false;
      if (!this.open) this.finish(true);
      return;
    }
    this.playing = true;
    let decoded;
    try {
      decoded = await item.audio;
    } catch {
      return; // reported by fetchAhead's catch
    }
    if (generation !== this.generation) return;
    const ctx = audioContext();
    const source = ctx.createBufferSource();
    source.buffer = decoded.buffer;
    source.connect(ctx.destination);
    source.onended = () => {
      if (generation !== this.generation) return;
      this.source = null;
      this.queue.shift();
      this.fetchAhead();
      this.playNext();
    };
    this.source = source;
    source.start();
    if (this.state !== "speaking") this.setState("speaking");
    logged(playLog, { text: item.text, bytes: decoded.bytes, type: decoded.type, at: performance.now(), state: ctx.state });
  }

  fail(err) {
    this.stop();
    this.hooks.onError?.(err.message, err.status);
  }
}
