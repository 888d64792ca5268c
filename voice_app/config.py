"""Which speech servers are in use now (the database row over .env, read on each use: a change
on the settings page takes effect at the next request, in every worker) and each user's
voice preferences."""

from __future__ import annotations

from dataclasses import dataclass, fields

from django.conf import settings

from .models import SpeechServers, VoicePrefs

SERVER_FIELDS = ("stt_base_url", "stt_model", "stt_api_key", "tts_base_url", "tts_model", "tts_voice", "tts_api_key")
SECRET_FIELDS = ("stt_api_key", "tts_api_key")
PREF_FIELDS = ("send_at_once", "auto_read", "telegram_voice_replies", "keep_audio")
HOW_TO_STT = ("No speech-to-text server is set up: the owner sets one in Settings → Voice (or STT_BASE_URL in .env), "
              "e.g. Speaches or LocalAI at http://host:8000 — any server with the OpenAI /v1/audio/transcriptions API.")
HOW_TO_TTS = ("No text-to-speech server is set up: the owner sets one in Settings → Voice (or TTS_BASE_URL in .env), "
              "e.g. Kokoro-FastAPI or openedai-speech at http://host:8880 — any server with the OpenAI /v1/audio/speech API.")


@dataclass(frozen=True)
class SpeechConfig:
    stt_base_url: str = ""
    stt_model: str = ""
    stt_api_key: str = ""
    tts_base_url: str = ""
    tts_model: str = ""
    tts_voice: str = ""
    tts_api_key: str = ""

    @property
    def stt_ready(self) -> bool:
        return bool(self.stt_base_url)

    @property
    def tts_ready(self) -> bool:
        return bool(self.tts_base_url)


def from_env() -> SpeechConfig:
    return SpeechConfig(**{name: getattr(settings, name.upper()) for name in SERVER_FIELDS})


def current() -> SpeechConfig:
    """The row's values where set, .env's elsewhere. One small query: call it off the event loop."""
    row = SpeechServers.objects.filter(pk=1).first()
    env = from_env()
    if row is None:
        return env
    values = {f.name: getattr(row, f.name) for f in fields(SpeechConfig)}
    return SpeechConfig(**{name: (getattr(env, name) if value is None else value) for name, value in values.items()})


def save_servers(changes: dict[str, str]) -> SpeechConfig:
    """Store the given fields (validated by the caller); the others keep following .env."""
    from django.utils import timezone

    row, _ = SpeechServers.objects.get_or_create(pk=1)
    for name, value in changes.items():
        setattr(row, name, value.rstrip("/") if name.endswith("_base_url") else value)
    row.updated_at = timezone.now()
    row.save()
    return current()


def prefs_for(user) -> VoicePrefs:
    return VoicePrefs.objects.get_or_create(user=user)[0]


def public(config: SpeechConfig) -> dict:
    """What the settings page shows: everything but the keys, which are only said to be set."""
    return {
        "stt": {"base_url": config.stt_base_url, "model": config.stt_model, "has_key": bool(config.stt_api_key),
                "configured": config.stt_ready},
        "tts": {"base_url": config.tts_base_url, "model": config.tts_model, "voice": config.tts_voice,
                "has_key": bool(config.tts_api_key), "configured": config.tts_ready, "format": settings.TTS_FORMAT},
    }
