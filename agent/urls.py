from django.urls import path

from . import views

urlpatterns = [
    path("profiles", views.profiles, name="agent-profiles"),
    path("tools", views.tools, name="agent-tools"),
]
