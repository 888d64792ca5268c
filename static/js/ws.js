// The session's WebSocket: reconnects with backoff and resumes the current run from the last
// seq it delivered, so a dropped connection loses and duplicates nothing.

const BACKOFF_MS = [300, 800, 1600, 3200, 6400, 10000];

export class SessionSocket {
  /** onFrame(frame) gets every server frame once; onState("open"|"reconnecting"|"closed", detail). */
  constructor(sessionId, { onFrame, onState }) {
    this.sessionId = sessionId;
    this.onFrame = onFrame;
    this.onState = onState || (() => {});
    this.runId = null; // the latest run whose frames we received
    this.seq = 0; // last seq delivered for runId
    this.runOpen = false; // the latest run has not sent a terminal frame yet
    this.attempt = 0;
    this.closed = false;
    this.queue = [];
    this.connect();
  }

  url() {
    const proto = location.protocol === "https:" ? "wss" : "ws";
    let url = `${proto}://${location.host}/ws/sessions/${this.sessionId}`;
    if (this.runId && this.runOpen) url += `?run_id=${encodeURIComponent(this.runId)}&after_seq=${this.seq}`;
    return url;
  }

  connect() {
    const ws = new WebSocket(this.url());
    this.ws = ws;
    ws.onopen = () => {
      this.attempt = 0;
      this.onState("open");
      for (const frame of this.queue.splice(0)) ws.send(JSON.stringify(frame));
    };
    ws.onmessage = (event) => this.receive(event.data);
    ws.onclose = (event) => {
      if (this.ws !== ws || this.closed) return;
      if (event.code === 4004 || event.code === 4401 || event.code === 4403) {
        this.closed = true;
        this.onState("closed", event.code);
        return;
      }
      const delay = BACKOFF_MS[Math.min(this.attempt, BACKOFF_MS.length - 1)];
      this.attempt += 1;
      this.onState("reconnecting", delay);
      this.timer = setTimeout(() => this.connect(), delay);
    };
  }

  receive(text) {
    let frame;
    try {
      frame = JSON.parse(text);
    } catch {
      return;
    }
    if (frame.type === "pong") return;
    if (frame.type === "resume_unavailable") this.runOpen = false; // reconnect without resuming
    if (frame.run_id) {
      if (frame.run_id === this.runId) {
        if (frame.seq <= this.seq) return; // already shown (replay overlapping what we had)
      } else {
        this.runId = frame.run_id;
        this.runOpen = true;
      }
      this.seq = frame.seq;
      if (["stream_end", "stream_stopped", "error"].includes(frame.type)) this.runOpen = false;
    }
    this.onFrame(frame);
  }

  send(frame) {
    if (this.ws && this.ws.readyState === WebSocket.OPEN) this.ws.send(JSON.stringify(frame));
    else this.queue.push(frame);
  }

  /** Drop the connection without giving up (tests and the debug page use it to exercise resume). */
  drop() {
    if (this.ws) this.ws.close();
  }

  close() {
    this.closed = true;
    clearTimeout(this.timer);
    if (this.ws) this.ws.close();
  }
}
