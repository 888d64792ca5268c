from django.contrib import admin

from .models import SpeechServers, VoiceClip, VoicePrefs


@admin.register(SpeechServers)
class SpeechServersAdmin(admin.ModelAdmin):
    list_display = ("__str__", "stt_base_url", "stt_model", "tts_base_url", "tts_model", "tts_voice", "updated_at")
    exclude = ("stt_api_key", "tts_api_key")  # write-only: set them on Settings → Voice


@admin.register(VoicePrefs)
class VoicePrefsAdmin(admin.ModelAdmin):
    list_display = ("user", "send_at_once", "auto_read", "telegram_voice_replies", "keep_audio")


@admin.register(VoiceClip)
class VoiceClipAdmin(admin.ModelAdmin):
    list_display = ("owner", "source", "kind", "duration_s", "size", "session", "created_at")
    list_filter = ("source", "kind")
    exclude = ("data",)
    raw_id_fields = ("session",)
