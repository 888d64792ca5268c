"""Benchmark: what Navi itself adds to a spoken turn, and what relaying audio costs it.

    .venv/bin/python bench/voice.py [--rounds 20] [--stt 0.4] [--llm 0.6] [--tts 0.3]

Prints figures, asserts nothing. Set-up: one real Navi server (daphne, in-memory channel layer),
the protocol-level test LLM (tests/llm_server.py) and the fake speech server
(tests/speech_server.py), both answering after fixed delays, and this process as the page: it
does what static/js/voice.js does after the microphone stops, with the same network calls.

  (a) End of speech → first audio byte of the answer: POST /sessions/<id>/audio (a 3 s WebM),
      the transcript sent as a `message` frame, the frames read until the first sentence is
      complete, POST /speech with it, its first byte. The speech-to-text server answers after
      --stt s, the model's first sentence comes --llm s after its request, the text-to-speech
      server's first byte --tts s after its request. Navi's own latency = the total − those
      three; also split by hop (upload → transcript, message → first sentence, /speech → first
      byte), each minus its server's delay. The page's own work (MediaRecorder's last chunk,
      decoding the audio) is not in it. Also the Navi process's CPU time per turn, which a busy
      machine does not stretch as it stretches the latencies.
  (b) Server CPU per second of audio relayed: /speech answers of 10 s of 24 kHz WAV (480 kB),
      4 at a time, and transcriptions of 10 s WAV uploads (320 kB, checked and forwarded): the
      Navi process's CPU time (/proc/<pid>/stat, every thread) over the audio seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402

from tests import audio_samples as samples  # noqa: E402
from tests.live_server import LiveNavi  # noqa: E402
from tests.live_ws import connect, planning_rule, recv_frame  # noqa: E402
from tests.llm_server import LLMServer, Rule, Turn  # noqa: E402
from tests.speech_server import SpeechServer  # noqa: E402

FIRST = "Tomorrow will be sunny and warm."
REST = " ".join(f"At {h} o'clock it stays dry." for h in range(8, 20))
SENTENCE_END = re.compile(r"[.!?…]\s")
CLK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK  # utime + stime


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


async def one_turn(navi: LiveNavi, http: httpx.AsyncClient, recording: bytes) -> dict:
    session_id = navi.create_session()
    async with connect(navi, session_id) as ws:
        t0 = time.perf_counter()  # the microphone stopped: the page has the recording
        response = await http.post(f"/sessions/{session_id}/audio", files={"file": ("speech.webm", recording, "audio/webm")})
        response.raise_for_status()
        text = response.json()["text"]
        t1 = time.perf_counter()
        await ws.send(json.dumps({"type": "message", "content": text}))
        answer = ""
        while not SENTENCE_END.search(answer + " " if answer.endswith(".") else answer):
            frame = await recv_frame(ws, 30)
            if frame["type"] == "stream_delta" and not frame.get("is_subagent"):
                answer += frame["delta"]
            elif frame["type"] in ("stream_end", "error", "stream_stopped"):
                answer = frame.get("content") or answer
                break
        first = answer[: SENTENCE_END.search(answer + " ").end()].strip()
        t2 = time.perf_counter()
        async with http.stream("POST", "/speech", json={"text": first}) as speech:
            async for _ in speech.aiter_raw():
                t3 = time.perf_counter()
                break
            else:
                raise RuntimeError("no audio")
        # Let the run finish before the next round (its frames are not timed).
        while True:
            frame = await recv_frame(ws, 30)
            if frame["type"] in ("stream_end", "error", "stream_stopped"):
                break
    return {"total": t3 - t0, "stt": t1 - t0, "llm": t2 - t1, "tts": t3 - t2, "first": first}


async def latency(navi: LiveNavi, rounds: int, delays: dict) -> None:
    recording = samples.webm(3.0)
    async with httpx.AsyncClient(base_url=navi.url, headers=navi.headers, timeout=60) as http:
        await one_turn(navi, http, recording)  # warm-up: first imports, connections
        before = cpu_seconds(navi.proc.pid)
        results = [await one_turn(navi, http, recording) for _ in range(rounds)]
        cpu = (cpu_seconds(navi.proc.pid) - before) / rounds
    assert results[0]["first"] == FIRST, results[0]["first"]
    servers = delays["stt"] + delays["llm"] + delays["tts"]
    own = [(r["total"] - servers) * 1000 for r in results]
    print(f"(a) end of speech → first audio byte, {rounds} turns; the servers' delays sum to {servers * 1000:.0f} ms")
    print(f"    total                 p50 {statistics.median([r['total'] for r in results]) * 1000:7.1f} ms"
          f"   p95 {pct([r['total'] for r in results], .95) * 1000:7.1f} ms")
    print(f"    Navi's own latency    p50 {statistics.median(own):7.1f} ms   p95 {pct(own, .95):7.1f} ms   max {max(own):7.1f} ms")
    for hop in ("stt", "llm", "tts"):
        extra = [(r[hop] - delays[hop]) * 1000 for r in results]
        label = {"stt": "upload → transcript", "llm": "message → 1st sentence", "tts": "/speech → first byte"}[hop]
        print(f"      {label:22s}  p50 {statistics.median(extra):7.1f} ms   p95 {pct(extra, .95):7.1f} ms")
    print(f"    Navi CPU per spoken turn (the whole turn: the chat made, the answer streamed to its end): {cpu * 1000:.0f} ms;"
          f" load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")


async def relay_cost(navi: LiveNavi, speech: SpeechServer, requests: int) -> None:
    speech.tts_delay = speech.stt_delay = 0.0
    speech.speech_seconds = 10.0
    pid = navi.proc.pid
    text = "A paragraph of an answer, read aloud."
    async with httpx.AsyncClient(base_url=navi.url, headers=navi.headers, timeout=60) as http:
        async def speak() -> int:
            size = 0
            async with http.stream("POST", "/speech", json={"text": text, "format": "wav"}) as response:
                async for chunk in response.aiter_raw():
                    size += len(chunk)
            return size

        await speak()
        before, started = cpu_seconds(pid), time.perf_counter()
        sizes = []
        for start in range(0, requests, 4):
            sizes += await asyncio.gather(*[speak() for _ in range(min(4, requests - start))])
        cpu, wall = cpu_seconds(pid) - before, time.perf_counter() - started
        seconds = requests * 10.0
        print(f"(b) /speech: {requests} answers of 10 s WAV ({sum(sizes) / requests / 1000:.0f} kB each), 4 at a time, "
              f"{wall:.1f} s: Navi CPU {cpu:.2f} s = {cpu / seconds * 1000:.2f} ms per second of audio relayed")

        session_id = navi.create_session()
        upload = samples.wav_tone(10.0, rate=16000)
        await http.post(f"/sessions/{session_id}/audio", files={"file": ("a.wav", upload, "audio/wav")})
        before, started = cpu_seconds(pid), time.perf_counter()
        for start in range(0, requests, 4):
            replies = await asyncio.gather(*[
                http.post(f"/sessions/{session_id}/audio", files={"file": ("a.wav", upload, "audio/wav")})
                for _ in range(min(4, requests - start))
            ])
            assert all(r.status_code == 200 for r in replies), replies[0].text
        cpu, wall = cpu_seconds(pid) - before, time.perf_counter() - started
        print(f"    /sessions/<id>/audio: {requests} uploads of 10 s WAV ({len(upload) / 1000:.0f} kB), 4 at a time, "
              f"{wall:.1f} s: Navi CPU {cpu:.2f} s = {cpu / seconds * 1000:.2f} ms per second of audio transcribed")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--stt", type=float, default=0.4, help="the speech-to-text server's delay (s)")
    parser.add_argument("--llm", type=float, default=0.6, help="the model's time to its first sentence (s)")
    parser.add_argument("--tts", type=float, default=0.3, help="the text-to-speech server's delay to its first byte (s)")
    parser.add_argument("--relay", type=int, default=40, help="requests in part (b)")
    args = parser.parse_args()
    delays = {"stt": args.stt, "llm": args.llm, "tts": args.tts}
    with LLMServer() as llm, SpeechServer(transcript="what is the weather tomorrow", stt_delay=args.stt,
                                           tts_delay=args.tts) as speech:
        llm.add_rule(planning_rule())
        # The first sentence in the first piece, after the model's delay; the rest streams on.
        llm.add_rule(Rule(match="weather", turns=[Turn(content=f"{FIRST} {REST}", chunk_size=len(FIRST) + 1,
                                                       first_delay=args.llm, delay=0.03)]))
        env = {"OLLAMA_HOST": llm.url, "STT_BASE_URL": speech.url, "TTS_BASE_URL": speech.url, "TTS_FORMAT": "wav",
               "CHAT_TITLES": "first_words", "LOG_LEVEL": "WARNING"}
        with LiveNavi(env=env) as navi:
            asyncio.run(latency(navi, args.rounds, delays))
            asyncio.run(relay_cost(navi, speech, args.relay))


if __name__ == "__main__":
    main()
