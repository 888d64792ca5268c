// Settings → Voice: the speech servers (staff; a key is write-only: left empty it stays as saved),
// "Test" (a phrase spoken by the TTS server and heard back by the STT server), and each user's
// own voice preferences (saved as they are ticked).
import { csrfToken } from "./api.js";
import { $, toast } from "./pagekit.js";

const SERVER_FIELDS = ["stt_base_url", "stt_model", "tts_base_url", "tts_model", "tts_voice"];
const KEYS = ["stt_api_key", "tts_api_key"];
const PREFS = { send_at_once: "#voice-send-at-once", auto_read: "#voice-auto-read",
  telegram_voice_replies: "#voice-telegram", keep_audio: "#voice-keep-audio" };
const input = (name) => $(`#${name.replaceAll("_", "-")}`);

async function call(method, path, body) {
  const init = { method, credentials: "same-origin", headers: { Accept: "application/json" } };
  if (method !== "GET") init.headers["X-CSRFToken"] = csrfToken();
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const response = await fetch(path, init);
  const data = await response.json().catch(() => ({}));
  if (!response.ok) throw new Error(data.error || `${method} ${path} failed with HTTP ${response.status}`);
  return data;
}

function show(voice) {
  const values = { stt_base_url: voice.stt.base_url, stt_model: voice.stt.model, tts_base_url: voice.tts.base_url,
    tts_model: voice.tts.model, tts_voice: voice.tts.voice };
  for (const name of SERVER_FIELDS) input(name).value = values[name] || "";
  for (const [name, has] of [["stt_api_key", voice.stt.has_key], ["tts_api_key", voice.tts.has_key]]) {
    input(name).value = "";
    input(name).placeholder = has ? "saved — type a new one to replace it" : "none";
    $(`#${name.replaceAll("_", "-")}-clear`).hidden = !has || !voice.can_edit;
  }
  for (const fieldset of ["#voice-stt", "#voice-tts"]) $(fieldset).disabled = !voice.can_edit;
  $("#voice-save").hidden = !voice.can_edit;
  $("#voice-readonly").hidden = voice.can_edit;
  for (const [name, selector] of Object.entries(PREFS)) $(selector).checked = !!voice[name];
}

async function saveServers(event) {
  event.preventDefault();
  const changes = {};
  for (const name of SERVER_FIELDS) changes[name] = input(name).value.trim();
  for (const name of KEYS) if (input(name).value) changes[name] = input(name).value;
  try {
    show(await call("PATCH", "/settings/voice", changes));
    $("#voice-test-result").className = "test-result";
    $("#voice-test-result").textContent = "Saved: the next recording and the next answer read aloud use these servers.";
  } catch (err) {
    toast(`Could not save the speech servers: ${err.message}`);
  }
}

async function clearKey(name) {
  try {
    show(await call("PATCH", "/settings/voice", { [name]: "" }));
  } catch (err) {
    toast(`Could not remove the key: ${err.message}`);
  }
}

async function test() {
  const out = $("#voice-test-result");
  const button = $("#voice-test");
  button.disabled = true;
  out.className = "test-result";
  out.textContent = "Speaking a phrase and listening to it…";
  try {
    const result = await call("POST", "/settings/voice/test");
    out.className = `test-result ${result.ok ? "ok" : "failed"}`;
    out.textContent = result.ok
      ? `Works: “${result.phrase}” came back as “${result.heard}” (speech ${result.tts_ms} ms, transcription ${result.stt_ms} ms).`
      : `${result.stage === "tts" ? "Text to speech" : "Speech to text"} failed: ${result.error}`;
  } catch (err) {
    out.className = "test-result failed";
    out.textContent = `The test could not run: ${err.message}`;
  } finally {
    button.disabled = false;
  }
}

async function savePref(name, checkbox) {
  const status = $("#voice-status");
  try {
    show(await call("PATCH", "/settings/voice", { [name]: checkbox.checked }));
    status.textContent = "Saved.";
    setTimeout(() => (status.textContent = ""), 2000);
  } catch (err) {
    checkbox.checked = !checkbox.checked;
    toast(`Could not save: ${err.message}`);
  }
}

async function start() {
  $("#voice-servers").addEventListener("submit", saveServers);
  $("#voice-test").addEventListener("click", test);
  for (const name of KEYS) $(`#${name.replaceAll("_", "-")}-clear`).addEventListener("click", () => clearKey(name));
  for (const [name, selector] of Object.entries(PREFS)) $(selector).addEventListener("change", (e) => savePref(name, e.target));
  try {
    show(await call("GET", "/settings/voice"));
    document.body.dataset.voiceSettingsReady = "1";
  } catch (err) {
    toast(`Could not load the voice settings: ${err.message}`);
  }
}

start();
