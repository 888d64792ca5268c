"""The speech servers (one row the owner edits in Settings → Voice), each user's voice
preferences, and recordings kept only for owners who turned keeping on."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone


class SpeechServers(models.Model):
    """One row (pk 1). A field left empty (null) follows its .env variable, so `.env` gives the
    first values and the page's changes win from then on; saving takes effect at once."""

    stt_base_url = models.CharField(max_length=500, null=True, blank=True, help_text="Empty: STT_BASE_URL.")
    stt_model = models.CharField(max_length=200, null=True, blank=True, help_text="Empty: STT_MODEL.")
    stt_api_key = models.CharField(max_length=500, null=True, blank=True, help_text="Empty: STT_API_KEY.")
    tts_base_url = models.CharField(max_length=500, null=True, blank=True, help_text="Empty: TTS_BASE_URL.")
    tts_model = models.CharField(max_length=200, null=True, blank=True, help_text="Empty: TTS_MODEL.")
    tts_voice = models.CharField(max_length=200, null=True, blank=True, help_text="Empty: TTS_VOICE.")
    tts_api_key = models.CharField(max_length=500, null=True, blank=True, help_text="Empty: TTS_API_KEY.")
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        verbose_name = "speech servers"
        verbose_name_plural = "speech servers"

    def __str__(self) -> str:
        return "Speech servers"


class VoicePrefs(models.Model):
    """How one user talks and listens on the page and in the messengers."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="voice_prefs")
    send_at_once = models.BooleanField(default=False, help_text="A transcript is sent at once instead of landing in the box.")
    auto_read = models.BooleanField(default=False, help_text="Answers are read aloud as they come.")
    telegram_voice_replies = models.BooleanField(default=False, help_text="Answers to voice notes come back as voice too.")
    keep_audio = models.BooleanField(default=False, help_text="Recordings are kept (and backed up) with their chat.")
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        verbose_name_plural = "voice preferences"

    def __str__(self) -> str:
        return f"Voice preferences of {self.user}"

    def as_dict(self) -> dict:
        return {"send_at_once": self.send_at_once, "auto_read": self.auto_read,
                "telegram_voice_replies": self.telegram_voice_replies, "keep_audio": self.keep_audio}


class VoiceClip(models.Model):
    """A recording kept because its owner turned keeping on: in the database, so the backup
    holds it, and deleted with its chat."""

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="voice_clips")
    session = models.ForeignKey("sessions_app.Session", null=True, blank=True, on_delete=models.CASCADE, related_name="+")
    source = models.CharField(max_length=16, default="page")  # page, telegram
    kind = models.CharField(max_length=8)  # webm, ogg, wav, mp3, m4a, flac, aac
    duration_s = models.FloatField(null=True, blank=True)
    size = models.PositiveIntegerField(default=0)
    data = models.BinaryField()
    transcript = models.TextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"{self.kind} recording of {self.owner} ({self.duration_s or 0:.0f} s)"
