// The microphone: MediaRecorder for the recording, an AnalyserNode for the level meter and for
// telling speech from silence (hands-free conversation and barge-in).
import { audioContext } from "./voice-player.js";

const TYPES = ["audio/webm;codecs=opus", "audio/ogg;codecs=opus", "audio/webm", "audio/mp4"];
const EXTENSIONS = { "audio/webm": "webm", "audio/ogg": "ogg", "audio/mp4": "m4a" };

export function recordingSupported() {
  return !!(navigator.mediaDevices?.getUserMedia && window.MediaRecorder);
}

/** Why the microphone cannot be used here, in words for the owner. */
export function microphoneProblem(err) {
  if (!window.isSecureContext) return "The browser allows the microphone only over HTTPS (or on localhost): open Navi at its https:// address.";
  if (!recordingSupported()) return "This browser cannot record audio (no MediaRecorder).";
  if (err?.name === "NotAllowedError") return "The microphone is blocked for Navi: allow it in the browser's site settings, then try again.";
  if (err?.name === "NotFoundError") return "No microphone was found on this device.";
  return `The microphone could not be opened (${err?.message || err}).`;
}

export class Recorder {
  constructor() {
    this.stream = null;
    this.recorder = null;
    this.chunks = [];
    this.analyser = null;
    this.samples = null;
    this.startedAt = 0;
  }

  get recording() {
    return this.recorder?.state === "recording";
  }

  /** Open the microphone (asks for permission the first time). */
  async open() {
    if (this.stream) return;
    this.stream = await navigator.mediaDevices.getUserMedia({
      audio: { echoCancellation: true, noiseSuppression: true, autoGainControl: true },
    });
    const ctx = audioContext();
    const input = ctx.createMediaStreamSource(this.stream);
    this.analyser = ctx.createAnalyser();
    this.analyser.fftSize = 1024;
    this.samples = new Float32Array(this.analyser.fftSize);
    input.connect(this.analyser);
  }

  start() {
    const mimeType = TYPES.find((t) => MediaRecorder.isTypeSupported(t));
    this.recorder = new MediaRecorder(this.stream, mimeType ? { mimeType } : undefined);
    this.chunks = [];
    this.recorder.ondataavailable = (e) => e.data.size && this.chunks.push(e.data);
    this.recorder.start(250);
    this.startedAt = performance.now();
  }

  elapsed() {
    return this.recording ? (performance.now() - this.startedAt) / 1000 : 0;
  }

  /** The loudness now, 0…1 (RMS of the last ~20 ms). */
  level() {
    if (!this.analyser) return 0;
    this.analyser.getFloatTimeDomainData(this.samples);
    let sum = 0;
    for (const v of this.samples) sum += v * v;
    return Math.sqrt(sum / this.samples.length);
  }

  /** Stop and return the recording as a File named after its type. */
  stop() {
    const recorder = this.recorder;
    this.recorder = null;
    if (!recorder || recorder.state === "inactive") return Promise.resolve(null);
    return new Promise((resolve) => {
      recorder.onstop = () => {
        const type = (recorder.mimeType || "audio/webm").split(";")[0];
        const blob = new Blob(this.chunks, { type });
        resolve(new File([blob], `speech.${EXTENSIONS[type] || "webm"}`, { type }));
      };
      recorder.stop();
    });
  }

  cancel() {
    const recorder = this.recorder;
    this.recorder = null;
    if (recorder && recorder.state !== "inactive") {
      recorder.onstop = null;
      recorder.stop();
    }
    this.chunks = [];
  }

  /** Let the microphone go (the browser's recording indicator goes off). */
  close() {
    this.cancel();
    for (const track of this.stream?.getTracks() || []) track.stop();
    this.stream = null;
    this.analyser = null;
  }
}

/** Speech or silence, frame by frame: `update(level, now)` → "speech" once speech began,
 * "end" after it was followed by `silenceMs` of quiet, else null. The noise floor adapts. */
export class SpeechDetector {
  constructor({ silenceMs = 1100, minSpeechMs = 250 } = {}) {
    this.silenceMs = silenceMs;
    this.minSpeechMs = minSpeechMs;
    this.reset();
  }

  reset() {
    this.smooth = 0; // the level held over the dips between syllables
    this.floor = 0.004;
    this.loudSince = 0;
    this.quietSince = 0;
    this.speaking = false;
  }

  update(level, now) {
    this.smooth = Math.max(level, this.smooth * 0.9); // ~60 frames a second: falls by half in ~110 ms
    const threshold = Math.max(0.015, this.floor * 3);
    if (this.smooth > threshold) {
      this.quietSince = 0;
      if (!this.loudSince) this.loudSince = now;
      if (!this.speaking && now - this.loudSince >= this.minSpeechMs) {
        this.speaking = true;
        return "speech";
      }
    } else {
      this.loudSince = 0;
      this.floor = this.floor * 0.95 + level * 0.05;
      if (this.speaking) {
        if (!this.quietSince) this.quietSince = now;
        if (now - this.quietSince >= this.silenceMs) {
          this.speaking = false;
          return "end";
        }
      }
    }
    return null;
  }
}
