"""Voice in a real browser: Chromium's fake microphone plays a WAV made here (a voice-like sound,
then silence, over and over), the fake speech server (tests/speech_server.py) transcribes and
speaks, the test LLM answers. One walk on a desktop in the light theme (settings and their Test,
Speak → the transcript in the box → the answer read aloud from its first sentence while the rest
is still being written, Stop, Read aloud, hold to talk, Esc), one at phone width in the dark theme (the hands-free
conversation: it listens, sends, reads, is interrupted by speech, and is left)."""

from __future__ import annotations

import math
import re
import shutil
import struct

import httpx
import pytest
from playwright.sync_api import expect

from tests.browser.test_daily import axe_serious
from tests.browser_support import CHROMIUM, chromium_browser, screenshot
from tests.live_server import LiveNavi
from tests.llm_server import Rule, Turn
from tests.speech_server import SpeechServer, audio_for
from voice_app import audio, speakable

pytestmark = pytest.mark.skipif(not shutil.which(CHROMIUM), reason="needs Debian's chromium (apt-get install chromium)")
DIRECT = Rule(system="planning step", match="", turns=[Turn(content="DIRECT")])
FIRST = "Tomorrow will be sunny."
REST = " ".join(f"Hour {i} stays dry." for i in range(1, 25))
SAID = "what is the weather tomorrow"


def voice_like(seconds: float, rate: int = 48000) -> bytes:
    """A voiced sound with syllables (harmonics of a gliding 140 Hz, 4 a second): speech to the page."""
    frames = bytearray()
    for i in range(int(seconds * rate)):
        t = i / rate
        envelope = 0.5 * (1 - math.cos(2 * math.pi * 4 * t))
        f0 = 140 + 30 * math.sin(2 * math.pi * 0.7 * t)
        value = sum(math.sin(2 * math.pi * f0 * k * t) / k for k in range(1, 6))
        frames += struct.pack("<h", int(4500 * envelope * value))
    return bytes(frames)


def mic_wav(rate: int = 48000) -> bytes:
    frames = voice_like(1.2, rate) + b"\0\0" * int(rate * 1.8)
    return (b"RIFF" + struct.pack("<I", 36 + len(frames)) + b"WAVE" + b"fmt " + struct.pack("<IHHIIHH", 16, 1, 1, rate, rate * 2, 2, 16)
            + b"data" + struct.pack("<I", len(frames)) + frames)


@pytest.fixture(scope="module")
def speech():
    with SpeechServer(transcript=SAID) as server:
        yield server


@pytest.fixture(scope="module")
def navi(live_llm, speech):
    env = {"OLLAMA_HOST": live_llm.url, "CHAT_TITLES": "first_words", "STT_BASE_URL": speech.url,
           "TTS_BASE_URL": speech.url, "TTS_FORMAT": "wav"}
    with LiveNavi(env=env) as server:
        yield server


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    wav = tmp_path_factory.mktemp("mic") / "voice.wav"
    wav.write_bytes(mic_wav())
    args = ("--use-fake-device-for-media-stream", "--use-fake-ui-for-media-stream",
            f"--use-file-for-fake-audio-capture={wav}", "--autoplay-policy=no-user-gesture-required")
    expect.set_options(timeout=30_000)
    with chromium_browser(args) as b:
        yield b


def new_page(browser, login_state, **options):
    context = browser.new_context(storage_state=login_state, **options)
    page = context.new_page()
    errors = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    return context, page, errors


def set_prefs(navi, **prefs) -> None:
    response = httpx.patch(f"{navi.url}/settings/voice", json=prefs, headers={"Authorization": f"Bearer {navi.token}"})
    assert response.status_code == 200, response.text


def open_new_chat(page, navi) -> None:
    page.goto(f"{navi.url}/")
    page.wait_for_selector("body[data-ready='1'][data-voice-ready='1']")
    with page.expect_response(lambda r: r.url.endswith("/sessions") and r.request.method == "POST"):
        page.click("#header-new-chat" if page.viewport_size["width"] < 720 else "#new-chat")
    page.wait_for_function("() => document.body.dataset.ready === '1' && window.navi && window.navi.socket.ws.readyState === 1"
                           " && window.navi.socket.sessionId === location.hash.slice(1)", timeout=60_000)


def voice_state(page) -> dict:
    return page.evaluate("""() => ({mode: document.body.dataset.voice, reading: document.body.dataset.voiceReading,
      streaming: !!document.querySelector('.bubble.assistant.streaming'), bargeIns: naviVoice.voice.bargeIns,
      played: naviVoice.playLog.map((p) => ({text: p.text, bytes: p.bytes, state: p.state}))})""")


def test_speak_a_request_and_hear_the_answer_start(browser, login_state, navi, live_llm, speech):
    live_llm.reset()
    speech.reset()
    set_prefs(navi, auto_read=False, send_at_once=False)
    context, page, errors = new_page(browser, login_state, viewport={"width": 1200, "height": 860}, color_scheme="light")

    # Settings → Voice: the servers .env named, the Test, auto-read turned on.
    speech.transcript = "Navi can hear you clearly."
    page.goto(f"{navi.url}/settings/#voice")
    page.wait_for_selector("body[data-voice-settings-ready='1']")
    expect(page.locator("#stt-base-url")).to_have_value(speech.url)
    page.click("#voice-test")
    expect(page.locator("#voice-test-result")).to_contain_text("Works: “Navi can hear you clearly.” came back as")
    page.check("#voice-auto-read")
    expect(page.locator("#voice-status")).to_have_text("Saved.")
    page.locator("#voice").scroll_into_view_if_needed()
    screenshot(page, "voice-settings-desktop-light")
    assert axe_serious(page) == []
    speech.transcript = SAID
    speech.reset()

    # Speak: click to start, a level and the time show, click again; the transcript lands in the box.
    live_llm.add_rule(DIRECT)
    live_llm.add_rule(Rule(match="weather tomorrow", turns=[
        Turn(content=f"{FIRST} {REST}", chunk_size=12, delay=0.15),  # the rest takes ~6 s to write
    ]))
    open_new_chat(page, navi)
    page.click("#mic-button")
    expect(page.locator("#voice-panel .voice-state")).to_have_text("Recording")
    expect(page.locator("#voice-panel .voice-time")).to_have_text(re.compile(r"0:0[2-9]"))
    screenshot(page, "voice-recording-desktop-light")
    page.click("#mic-button")
    expect(page.locator("#input")).to_have_value(SAID)
    expect(page.locator("#voice-panel")).to_be_hidden()
    recording = speech.of("transcriptions")[-1].file
    info = audio.inspect(recording[2])  # what Chrome's MediaRecorder wrote, read by Navi's own parser
    assert recording[0] == f"speech.{info.kind}" and info.kind in ("webm", "ogg") and 1.5 < info.duration_s < 6

    # Send it: the first sentence is spoken while the rest of the answer is still being written.
    page.press("#input", "Enter")
    expect(page.locator("body")).to_have_attribute("data-voice-reading", "speaking")
    state = voice_state(page)
    assert state["streaming"], "reading should start before the answer is finished"
    assert state["played"][0] == {"text": FIRST, "bytes": len(audio_for(FIRST, "wav")), "state": "running"}
    assert speech.of("speech")[0].fields["input"] == FIRST
    expect(page.locator("#voice-panel .voice-state")).to_have_text("Reading aloud…")
    screenshot(page, "voice-reading-desktop-light")
    assert axe_serious(page) == []

    # Stop at any moment: nothing more is asked for or played, though the answer goes on.
    page.click("#voice-panel .voice-cancel")
    expect(page.locator("body")).to_have_attribute("data-voice-reading", "idle")
    logs = "() => [naviVoice.fetchLog.length, naviVoice.playLog.length]"
    before = page.evaluate(logs)
    expect(page.locator(".group.turn .bubble.assistant").last).to_contain_text("Hour 24 stays dry.")
    expect(page.locator(".group.turn .msg-actions .read-aloud").last).to_be_visible()  # the run has ended
    assert page.evaluate(logs) == before
    assert page.evaluate("() => document.body.dataset.voiceReading") == "idle"

    # Read aloud on the finished answer; Stop reading on the same button.
    button = page.locator(".group.turn .msg-actions .read-aloud").last
    button.click()
    expect(page.locator("body")).to_have_attribute("data-voice-reading", "speaking")
    expect(button).to_have_text("Stop reading")
    expect(button).to_have_attribute("aria-pressed", "true")
    button.click()
    expect(page.locator("body")).to_have_attribute("data-voice-reading", "idle")
    expect(button).to_have_text("Read aloud")

    # Hold to talk: press, speak, let go.
    page.locator("#mic-button").hover()
    page.mouse.down()
    expect(page.locator("#voice-panel .voice-state")).to_have_text("Recording")
    expect(page.locator("#voice-panel .voice-time")).to_have_text(re.compile(r"0:0[2-9]"))
    page.mouse.up()
    expect(page.locator("#input")).to_have_value(SAID)
    page.fill("#input", "")

    # Esc cancels a recording: nothing is transcribed.
    transcribed = len(speech.of("transcriptions"))
    page.click("#mic-button")
    expect(page.locator("#voice-panel .voice-state")).to_have_text("Recording")
    page.keyboard.press("Escape")
    expect(page.locator("#voice-panel")).to_be_hidden()
    assert len(speech.of("transcriptions")) == transcribed
    assert errors == []
    context.close()


def test_a_hands_free_conversation_at_phone_width_in_the_dark(browser, login_state, navi, live_llm, speech):
    live_llm.reset()
    speech.reset()
    set_prefs(navi, auto_read=False)
    live_llm.add_rule(DIRECT)
    live_llm.add_rule(Rule(match="weather tomorrow", turns=[Turn(content=f"{FIRST} {REST}", chunk_size=40, delay=0.02)]))
    context, page, errors = new_page(browser, login_state, viewport={"width": 390, "height": 844}, color_scheme="dark",
                                     is_mobile=True, has_touch=True)
    open_new_chat(page, navi)
    page.click("#talk-button")
    expect(page.locator("#voice-panel .voice-state")).to_contain_text("Conversation · ")
    expect(page.locator("#talk-button")).to_have_attribute("aria-pressed", "true")

    # It hears the voice end, sends what was said, and reads the answer.
    expect(page.locator(".group.user .user-bubble").last).to_contain_text(SAID)
    expect(page.locator("body")).to_have_attribute("data-voice", "speaking")
    screenshot(page, "voice-conversation-phone-dark")
    assert axe_serious(page) == []
    assert voice_state(page)["played"][0]["text"] == FIRST

    # The voice comes again while it reads: the reading stops (barge-in) and it listens.
    try:
        page.wait_for_function("() => naviVoice.voice.bargeIns >= 1", timeout=45_000)
    except Exception as exc:
        raise AssertionError(f"no barge-in while it read: {voice_state(page)}") from exc
    expect(page.locator("#voice-panel .voice-state")).to_have_text(re.compile(r"Conversation · (Hearing you|Transcribing|Thinking|Speaking)"))

    page.click("#voice-panel .voice-cancel")  # Leave conversation
    expect(page.locator("body")).to_have_attribute("data-voice", "idle")
    expect(page.locator("#voice-panel")).to_be_hidden()
    expect(page.locator("#talk-button")).to_have_attribute("aria-pressed", "false")
    screenshot(page, "voice-left-phone-dark")

    page.goto(f"{navi.url}/settings/#voice")
    page.wait_for_selector("body[data-voice-settings-ready='1']")
    page.locator("#voice").scroll_into_view_if_needed()
    screenshot(page, "voice-settings-phone-dark")
    assert axe_serious(page) == []
    assert errors == []
    context.close()


def test_without_servers_the_buttons_say_how_to_set_one_up(browser, login_state, navi, speech):
    speech.reset()
    set_prefs(navi, stt_base_url="", tts_base_url="")
    try:
        context, page, errors = new_page(browser, login_state, viewport={"width": 1200, "height": 800})
        page.goto(f"{navi.url}/")
        page.wait_for_selector("body[data-ready='1'][data-voice-ready='1']")
        expect(page.locator("#mic-button")).to_have_class(re.compile(r"\bunavailable\b"))
        page.click("#mic-button")
        expect(page.locator("#toast")).to_contain_text("Speaking needs a speech-to-text server")
        expect(page.locator("#toast")).to_contain_text("Settings → Voice")
        expect(page.locator("#voice-panel")).to_be_hidden()
        page.click("#talk-button")
        expect(page.locator("body")).not_to_have_attribute("data-voice", "listening")
        assert speech.heard == [] and errors == []
        context.close()
    finally:
        set_prefs(navi, stt_base_url=speech.url, tts_base_url=speech.url)


def test_the_page_reads_answers_by_the_same_rules_as_telegram(browser, login_state, navi):
    context, page, _ = new_page(browser, login_state)
    page.goto(f"{navi.url}/settings/")
    mark = page.evaluate("""async () => {
      const {voiceMark} = await import('/static/js/voice.js');
      const node = document.createElement('div');
      voiceMark(node, {source: 'telegram', duration_s: 7.4});
      return node.textContent;
    }""")
    assert mark == "Voice note · 0:07"
    sample = ("## Plan\nRun this:\n\n```bash\nrm -rf /tmp/x\n```\n\nSee [the docs](https://example.org/a_(b)) or "
              "<https://navi.example.net/x>. The sum is $x^2$ here.\n\n- **first** item\n- second `make run`\n"
              "| a | b |\n|---|---|\n| 1 | 2 |\nUse *file_name* and snake_case_words.")
    said = page.evaluate("async (text) => (await import('/static/js/speech-text.js')).speakable(text)", sample)
    assert said == speakable.speakable(sample)
    streamed = page.evaluate("""async (text) => {
      const {SentenceStream} = await import('/static/js/speech-text.js');
      const stream = new SentenceStream(); const out = [];
      for (let i = 0; i < text.length; i += 3) out.push(...stream.push(text.slice(i, i + 3)));
      return [...out, ...stream.flush()];
    }""", sample)
    assert streamed == speakable.sentences(said)
    context.close()
