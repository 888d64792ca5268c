from django.apps import AppConfig


class VoiceAppConfig(AppConfig):
    """Nothing to connect at start: its views are routed by navi_project/urls.py, and the apps
    above it (messaging_app) call it directly. Its settings live at /settings/voice."""

    name = "voice_app"
    verbose_name = "Voice"
