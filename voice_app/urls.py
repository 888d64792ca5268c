from django.urls import path

from . import views

urlpatterns = [
    path("sessions/<str:session_id>/audio", views.session_audio, name="session-audio"),
    path("speech", views.speech, name="speech"),
    path("settings/voice", views.voice_settings, name="voice-settings"),
    path("settings/voice/test", views.voice_test, name="voice-test"),
]
