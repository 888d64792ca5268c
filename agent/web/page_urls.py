from django.conf import settings
from django.urls import path
from django.views.generic import RedirectView

from . import views

urlpatterns = [
    path("", views.chat_page, name="chat"),
    path("debug", views.debug_page, name="debug"),
    path("settings/", views.settings_page, name="settings-page"),
    path("memory/", views.memory_page, name="memory-page"),
    # Browsers ask for /favicon.ico whatever the page says; the icon is a static SVG.
    path("favicon.ico", RedirectView.as_view(url=f"{settings.STATIC_URL}favicon.svg", permanent=True)),
]
