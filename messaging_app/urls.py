from django.urls import path

from . import views

urlpatterns = [
    path("settings/telegram", views.telegram_settings, name="telegram-settings"),
    path("settings/telegram/link", views.telegram_link, name="telegram-link"),
]
