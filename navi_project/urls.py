from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from agent.web.health import health
from sessions_app.metrics_access import metrics_view
from sessions_app.throttle import login_throttled

urlpatterns = [
    path("health", health, name="health"),
    path("metrics", metrics_view, name="metrics"),
    # Both login forms count failed attempts (sessions_app.throttle); the admin's is routed
    # here first so that its own URL inside admin.site.urls is never reached.
    path("admin/login/", login_throttled(admin.site.login)),
    path("admin/", admin.site.urls),
    path("login/", login_throttled(auth_views.LoginView.as_view()), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("agents/", include("agent.web.urls")),
    path("", include("sessions_app.urls")),
    path("", include("agent.web.session_urls")),
    path("", include("memory_app.urls")),
    path("", include("notify_app.urls")),
    path("", include("routines_app.urls")),
    path("", include("knowledge_app.urls")),
    path("", include("messaging_app.urls")),
    path("", include("voice_app.urls")),
    path("", include("tools_app.urls")),
    path("", include("agent.web.page_urls")),
]

handler404 = "navi_project.views.not_found"
