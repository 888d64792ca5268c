from django.urls import path

from . import model_choice, views

# The session paths that start or steer a run; sessions_app.urls has the rest of /sessions.
urlpatterns = [
    path("models", model_choice.models, name="models"),
    path("models/pull", model_choice.model_pull, name="models-pull"),
    path("settings/connections/test", model_choice.connection_test, name="connection-test"),
    path("sessions/<str:session_id>/regenerate", views.session_regenerate, name="session-regenerate"),
    path("sessions/<str:session_id>/messages/<str:message_id>/edit", views.session_edit, name="session-message-edit"),
    path("sessions/<str:session_id>/messages", views.session_messages, name="session-messages"),
    path("sessions/<str:session_id>/stop", views.session_stop, name="session-stop"),
    path("sessions/<str:session_id>/approvals/<str:approval_id>", views.session_approval, name="session-approval"),
]
