from django.urls import path

from . import allowed_hosts, files, settings_views, views

# No trailing slashes: the same paths as the original Navi, so existing clients work. The paths
# that start or steer a run (messages, stop, regenerate, edit, approvals) are in agent.web.session_urls.
urlpatterns = [
    path("sessions", views.sessions, name="sessions"),
    path("sessions/import", views.session_import, name="session-import"),  # before <session_id>
    path("sessions/<str:session_id>", views.session_detail, name="session-detail"),
    path("sessions/<str:session_id>/export", views.session_export, name="session-export"),
    path("sessions/<str:session_id>/pin", views.session_pin, name="session-pin"),
    path("sessions/<str:session_id>/context", views.session_context, name="session-context"),
    path(
        "sessions/<str:session_id>/messages/<str:message_id>/versions/<str:n>/select",
        views.message_version_select,
        name="session-message-version-select",
    ),
    path("sessions/<str:session_id>/files", files.upload_file, name="session-files"),
    path("sessions/<str:session_id>/files/<str:name>", files.download_file, name="session-file"),
    path("settings", settings_views.user_settings, name="user-settings"),
    path("settings/tokens", settings_views.tokens, name="user-tokens"),
    path("settings/allowed-hosts", allowed_hosts.allowed_hosts, name="allowed-hosts"),
    path("settings/allowed-hosts/<str:entry>", allowed_hosts.allowed_host_detail, name="allowed-host"),
    path("settings/tokens/<str:token_id>", settings_views.token_detail, name="user-token"),
]
