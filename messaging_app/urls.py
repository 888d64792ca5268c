from django.urls import path

from . import views
from .telegram.webhook_view import telegram_webhook

urlpatterns = [
    path("settings/telegram", views.telegram_settings, name="telegram-settings"),
    path("settings/telegram/link", views.telegram_link, name="telegram-link"),
    path("telegram/webhook", telegram_webhook, name="telegram-webhook"),
]
