from django.apps import AppConfig

from navi_project.startup import server_started


class MessagingAppConfig(AppConfig):
    name = "messaging_app"
    verbose_name = "Messaging"

    def ready(self) -> None:
        # Imported here, not at the top: these modules import models (Django's app-loading rule).
        from agent.web.health import register_check
        from messaging_app import links
        from messaging_app.telegram import service, status
        from messaging_app.telegram.notify import TelegramSender
        from notify_app.senders import register_sender
        from sessions_app.settings_views import register_settings_extra

        server_started.connect(service.on_server_started, dispatch_uid="messaging_app.telegram")
        register_settings_extra("telegram", links.status_for)
        register_check("telegram", status.health)
        register_sender(TelegramSender())  # routine results and approvals to the linked chat
