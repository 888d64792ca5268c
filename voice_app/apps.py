from django.apps import AppConfig


class VoiceAppConfig(AppConfig):
    name = "voice_app"
    verbose_name = "Voice"

    def ready(self) -> None:
        # Imported here, not at the top: these modules import models (Django's app-loading rule).
        from sessions_app.settings_views import register_settings_extra
        from voice_app import config

        register_settings_extra("voice", config.summary_for)  # GET /settings: what the page's buttons need
