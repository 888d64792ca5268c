"""Voice over REST: `POST /sessions/<id>/audio` (a recording → its text), `POST /speech` (text
→ audio, streamed as the TTS server makes it), `GET/PATCH /settings/voice` and
`POST /settings/voice/test` (a phrase spoken and heard back). Async views: a transcription
takes seconds and must not hold one of the server's threads."""

from __future__ import annotations

import re
import time

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.utils import timezone

from navi_project import jsonsafe
from navi_project.hop import db_hop
from navi_project.http import json_error
from sessions_app.auth import unauthenticated_response
from sessions_app.models import Session

from . import audio, config
from .client import MAX_SPEECH_CHARS, SPEECH_FORMATS, SpeechError, open_speech, synthesize, transcribe
from .recordings import check_recording, keep_clip

TEST_PHRASE = "Navi can hear you clearly."
MAX_FIELD_CHARS = 500
_URL = re.compile(r"^https?://[^\s/?#]+(/[^\s?#]*)?$")


async def _user(request: HttpRequest):
    if getattr(request, "navi_token_auth", False):
        return request.user
    user = await request.auser()
    return user if user.is_authenticated else None


def _allow(request: HttpRequest, *methods: str) -> JsonResponse | None:
    if request.method in methods:
        return None
    response = json_error(f"method {request.method} not allowed here; use {', '.join(methods)}", 405)
    response["Allow"] = ", ".join(methods)
    return response


def _json_body(request: HttpRequest) -> dict:
    try:
        body = jsonsafe.loads(request.body or b"{}")
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise SpeechError(f"request body is not valid JSON: {exc}", 400) from None
    if not isinstance(body, dict):
        raise SpeechError("request body must be a JSON object", 400)
    return body


# --- a recording → its text ------------------------------------------------------------------------
def _read_upload(request: HttpRequest) -> bytes:
    upload = request.FILES.get("file")
    if upload is None:
        raise SpeechError('no recording received; send it as multipart form data in a field named "file"', 400)
    return upload.read()


def _receive(request: HttpRequest, user, session_id: str) -> tuple[Session, bytes, audio.AudioInfo, config.SpeechConfig, bool]:
    """Everything before the speech server in one thread hop: the chat is the caller's, the upload
    is audio of an allowed length; the servers to use, and whether to keep the recording."""
    session = Session.objects.owned_by(user, session_id).first()
    if session is None:
        raise SpeechError(f"no session '{session_id}'", 404)
    data = _read_upload(request)
    info = check_recording(data)
    return session, data, info, config.current(), config.prefs_for(user).keep_audio


async def session_audio(request: HttpRequest, session_id: str) -> HttpResponse:
    """A recording (multipart field `file`) → `{"text", "duration_s"}`; nothing is sent to the chat."""
    user = await _user(request)
    if user is None:
        return unauthenticated_response()
    if refused := _allow(request, "POST"):
        return refused
    try:
        session, data, info, servers, keep = await db_hop(_receive, request, user, session_id)
        text = await transcribe(data, info, servers)
    except SpeechError as exc:
        return json_error(exc.message, exc.status)
    if keep:
        await db_hop(keep_clip, user, session.pk, "page", data, info, text)
    return JsonResponse({"text": text, "duration_s": round(info.duration_s, 2)})


# --- text → speech -------------------------------------------------------------------------------
async def speech(request: HttpRequest) -> HttpResponse:
    """`{"text", "voice"?, "format"?}` → the audio, streamed as the TTS server sends it."""
    user = await _user(request)
    if user is None:
        return unauthenticated_response()
    if refused := _allow(request, "POST"):
        return refused
    try:
        body = _json_body(request)
        text = body.get("text")
        if not isinstance(text, str) or not text.strip():
            raise SpeechError('"text" is required: the words to speak', 400)
        if len(text) > MAX_SPEECH_CHARS:
            raise SpeechError(f"text is {len(text)} characters; one request speaks up to {MAX_SPEECH_CHARS}: "
                              "send it in parts (a sentence or a paragraph at a time)", 400)
        fmt = body.get("format") or settings.TTS_FORMAT
        if fmt not in SPEECH_FORMATS:
            raise SpeechError(f"format must be one of {', '.join(SPEECH_FORMATS)}", 400)
        voice = body.get("voice") or ""
        if not isinstance(voice, str) or len(voice) > 200:
            raise SpeechError('"voice" must be a voice name of the TTS server', 400)
        servers = await db_hop(config.current)
        stream = await open_speech(text.strip(), servers, fmt, voice)
    except SpeechError as exc:
        return json_error(exc.message, exc.status)
    response = StreamingHttpResponse(stream.chunks(), content_type=stream.content_type)
    response["Cache-Control"] = "no-store"
    response["X-Accel-Buffering"] = "no"  # nginx passes the first bytes on at once
    return response


# --- settings ----------------------------------------------------------------------------------------
def _settings_json(user) -> dict:
    return {**config.public(config.current()), **config.prefs_for(user).as_dict(), "can_edit": user.is_staff,
            "max_seconds": settings.VOICE_MAX_SECONDS}


def _server_changes(body: dict) -> dict[str, str]:
    changes = {}
    for name in config.SERVER_FIELDS:
        if name not in body:
            continue
        value = body[name]
        if value is None:
            value = ""
        if not isinstance(value, str) or len(value) > MAX_FIELD_CHARS:
            raise SpeechError(f"{name} must be text of at most {MAX_FIELD_CHARS} characters", 400)
        value = value.strip()
        if name.endswith("_base_url") and value and not _URL.match(value):
            raise SpeechError(f"{name} must be an http:// or https:// address such as http://192.168.1.20:8000 "
                              "(empty turns that half of voice off)", 400)
        if name.endswith("_model") and name.startswith("stt") and not value:
            raise SpeechError("stt_model must name the transcription model, e.g. whisper-1 or "
                              "Systran/faster-whisper-small", 400)
        changes[name] = value
    return changes


def _update(user, body: dict) -> dict:
    unknown = set(body) - set(config.SERVER_FIELDS) - set(config.PREF_FIELDS)
    if unknown:
        raise SpeechError(f"unknown voice setting(s) {', '.join(sorted(unknown))}; known: "
                          f"{', '.join(config.SERVER_FIELDS + config.PREF_FIELDS)}", 400)
    changes = _server_changes(body)
    if changes and not user.is_staff:
        raise SpeechError("only the owner (a staff account) changes the speech servers; your own voice "
                          "preferences you can change", 403)
    prefs = config.prefs_for(user)
    for name in config.PREF_FIELDS:
        if name in body:
            if not isinstance(body[name], bool):
                raise SpeechError(f"{name} must be true or false", 400)
            setattr(prefs, name, body[name])
    if changes:
        config.save_servers(changes)
    prefs.updated_at = timezone.now()
    prefs.save()
    return _settings_json(user)


async def voice_settings(request: HttpRequest) -> HttpResponse:
    user = await _user(request)
    if user is None:
        return unauthenticated_response()
    if refused := _allow(request, "GET", "PATCH"):
        return refused
    try:
        if request.method == "GET":
            return JsonResponse(await db_hop(_settings_json, user))
        return JsonResponse(await db_hop(_update, user, _json_body(request)))
    except SpeechError as exc:
        return json_error(exc.message, exc.status)


async def voice_test(request: HttpRequest) -> HttpResponse:
    """Speak a short phrase with the TTS server and transcribe it back with the STT server."""
    user = await _user(request)
    if user is None:
        return unauthenticated_response()
    if refused := _allow(request, "POST"):
        return refused
    servers = await db_hop(config.current)
    result: dict = {"phrase": TEST_PHRASE, "heard": "", "ok": False, "error": "", "stage": "tts"}
    try:
        started = time.perf_counter()
        data, _ = await synthesize(TEST_PHRASE, servers, "wav")
        result["tts_ms"] = round((time.perf_counter() - started) * 1000)
        result["stage"] = "stt"
        info = audio.inspect(data)
        started = time.perf_counter()
        result["heard"] = await transcribe(data, info, servers)
        result["stt_ms"] = round((time.perf_counter() - started) * 1000)
    except SpeechError as exc:
        result["error"] = exc.message
        return JsonResponse(result)
    except audio.NotAudio as exc:
        result["error"] = f"the text-to-speech server did not answer with WAV audio ({exc})"
        return JsonResponse(result)
    result["stage"] = "done"
    result["ok"] = _similar(TEST_PHRASE, result["heard"])
    if not result["ok"]:
        result["error"] = f"the phrase came back as {result['heard']!r}: check the models and the voice"
    return JsonResponse(result)


def _similar(said: str, heard: str) -> bool:
    words = lambda text: re.findall(r"[a-z]+", text.lower())  # noqa: E731
    expected, got = words(said), set(words(heard))
    return sum(w in got for w in expected) >= len(expected) / 2
