"""A recording sent to be transcribed (from the page, a script or a messenger): checked before
any speech server hears it, and kept afterwards only when its owner turned keeping on."""

from __future__ import annotations

from django.conf import settings

from . import audio, config
from .client import SpeechError
from .models import VoiceClip


def check_recording(data: bytes) -> audio.AudioInfo:
    """The recording's kind and length, or SpeechError 400 saying why it is refused."""
    try:
        info = audio.inspect(data)
    except audio.NotAudio as exc:
        raise SpeechError(str(exc), 400) from None
    limit = settings.VOICE_MAX_SECONDS
    if info.duration_s is None:
        raise SpeechError(f"could not tell how long the {info.kind} recording is (its headers do not say); "
                          "record it again, or send WAV, MP3 or Ogg/Opus", 400)
    if info.duration_s > limit + 0.5:
        raise SpeechError(f"the recording is {info.duration_s:.0f} s long; Navi transcribes up to {limit} s "
                          "(VOICE_MAX_SECONDS): send a shorter one", 400)
    return info


def keep_clip(user, session_id, source: str, data: bytes, info: audio.AudioInfo, transcript: str) -> None:
    """Kept only when the owner turned keeping on (then it is in the database, and the backup).
    Callers that read the preference already may call it only when it is on."""
    if not config.prefs_for(user).keep_audio:
        return
    VoiceClip.objects.create(owner=user, session_id=session_id, source=source, kind=info.kind,
                             duration_s=info.duration_s, size=len(data), data=data, transcript=transcript)
