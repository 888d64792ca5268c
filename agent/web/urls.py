from django.urls import path

from . import views

urlpatterns = [
    path("profiles", views.profiles, name="agent-profiles"),
    path("tools", views.tools, name="agent-tools"),
    path("reliability", views.reliability, name="agent-reliability"),
    path("llm_calls/<str:session_id>", views.session_llm_calls, name="agent-llm-calls"),
]
