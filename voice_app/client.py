"""The speech servers over HTTP (httpx): `transcribe` posts a recording to
/v1/audio/transcriptions, `open_speech` streams /v1/audio/speech back as it is made. Failures
become SpeechError with the status a view answers (503 unreachable or not set up, 502 the
server refused) and a message saying what to check."""

from __future__ import annotations

import asyncio
import json
import weakref
from dataclasses import dataclass
from typing import AsyncIterator

import httpx
from django.conf import settings

from .audio import AudioInfo
from .config import HOW_TO_STT, HOW_TO_TTS, SpeechConfig

SPEECH_FORMATS = {"mp3": "audio/mpeg", "opus": "audio/ogg", "aac": "audio/aac", "flac": "audio/flac",
                  "wav": "audio/wav", "pcm": "audio/pcm"}
MAX_SPEECH_CHARS = 4096  # the OpenAI API's own limit for one request
MAX_DETAIL_CHARS = 300

_clients: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


class SpeechError(Exception):
    def __init__(self, message: str, status: int = 502) -> None:
        super().__init__(message)
        self.message, self.status = message, status


def _client() -> httpx.AsyncClient:
    """One pooled client per event loop: a turn's sentences reuse the connection."""
    loop = asyncio.get_running_loop()
    client = _clients.get(loop)
    if client is None or client.is_closed:
        timeout = httpx.Timeout(settings.VOICE_TIMEOUT_S, connect=10.0)
        client = _clients[loop] = httpx.AsyncClient(timeout=timeout, limits=httpx.Limits(max_keepalive_connections=8))
    return client


def endpoint(base_url: str, path: str) -> str:
    base = base_url.rstrip("/")
    return f"{base}/{path}" if base.endswith("/v1") else f"{base}/v1/{path}"


def _headers(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"} if key else {}


def _detail(response: httpx.Response, body: bytes) -> str:
    text = body.decode("utf-8", "replace").strip()
    try:
        payload = json.loads(text)
        if isinstance(payload, dict):
            error = payload.get("error") or payload.get("detail") or payload.get("message")
            if isinstance(error, dict):
                error = error.get("message")
            text = str(error or text)
    except ValueError:
        pass
    return " ".join(text.split())[:MAX_DETAIL_CHARS] or response.reason_phrase


def _unreachable(what: str, base: str, exc: Exception, setting: str) -> SpeechError:
    reason = type(exc).__name__ if not str(exc) else str(exc)
    return SpeechError(f"cannot reach the {what} server at {base} ({reason}); is it running? "
                       f"Check {setting} in Settings → Voice", 503)


async def transcribe(data: bytes, info: AudioInfo, config: SpeechConfig, *, language: str = "") -> str:
    """The text spoken in `data` (its kind checked by voice_app.audio)."""
    if not config.stt_ready:
        raise SpeechError(HOW_TO_STT, 503)
    form = {"model": config.stt_model, "response_format": "json"}
    if language:
        form["language"] = language
    url = endpoint(config.stt_base_url, "audio/transcriptions")
    try:
        response = await _client().post(url, data=form, files={"file": (f"speech.{info.kind}", data, info.mime)},
                                        headers=_headers(config.stt_api_key))
    except httpx.TransportError as exc:
        raise _unreachable("speech-to-text", config.stt_base_url, exc, "the speech-to-text URL (STT_BASE_URL)") from None
    if response.status_code != 200:
        raise SpeechError(f"the speech-to-text server answered HTTP {response.status_code}: "
                          f"{_detail(response, response.content)} (model {config.stt_model!r})", 502)
    if response.headers.get("content-type", "").startswith("text/plain"):
        return response.text.strip()
    try:
        text = response.json().get("text")
    except (ValueError, AttributeError):
        text = None
    if not isinstance(text, str):
        raise SpeechError("the speech-to-text server answered without a transcript (no \"text\" in its JSON)", 502)
    return text.strip()


@dataclass
class SpeechStream:
    """An answer of the TTS server being received: its type, then its bytes as they come."""

    content_type: str
    response: httpx.Response

    async def chunks(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self.response.aiter_raw():
                if chunk:
                    yield chunk
        finally:
            await self.response.aclose()

    async def aclose(self) -> None:
        await self.response.aclose()


async def open_speech(text: str, config: SpeechConfig, fmt: str, voice: str = "", speed: float | None = None) -> SpeechStream:
    """Ask for `text` spoken; returns once the server answered its status line (not its audio)."""
    if not config.tts_ready:
        raise SpeechError(HOW_TO_TTS, 503)
    body: dict = {"model": config.tts_model, "input": text, "voice": voice or config.tts_voice, "response_format": fmt}
    if speed is not None:
        body["speed"] = speed
    client = _client()
    request = client.build_request("POST", endpoint(config.tts_base_url, "audio/speech"), json=body,
                                   headers=_headers(config.tts_api_key))
    try:
        response = await client.send(request, stream=True)
    except httpx.TransportError as exc:
        raise _unreachable("text-to-speech", config.tts_base_url, exc, "the text-to-speech URL (TTS_BASE_URL)") from None
    if response.status_code != 200:
        body_bytes = await response.aread()
        await response.aclose()
        raise SpeechError(f"the text-to-speech server answered HTTP {response.status_code}: "
                          f"{_detail(response, body_bytes)} (model {config.tts_model!r}, voice {body['voice']!r})", 502)
    content_type = response.headers.get("content-type", "").split(";")[0].strip()
    if not content_type.startswith("audio/"):
        content_type = SPEECH_FORMATS.get(fmt, "application/octet-stream")
    return SpeechStream(content_type, response)


async def synthesize(text: str, config: SpeechConfig, fmt: str, voice: str = "") -> tuple[bytes, str]:
    """All of `text` spoken, as (audio bytes, content type)."""
    stream = await open_speech(text, config, fmt, voice)
    data = bytearray()
    try:
        async for chunk in stream.chunks():
            data += chunk
    except httpx.TransportError as exc:
        raise _unreachable("text-to-speech", config.tts_base_url, exc, "the text-to-speech URL (TTS_BASE_URL)") from None
    return bytes(data), stream.content_type
