from django.urls import path

from . import views

# No trailing slash on the REST paths (as the other APIs); the page is /routines/.
urlpatterns = [
    path("routines", views.routines, name="routines"),
    path("routines/", views.routines_page, name="routines-page"),
    path("routines/preview", views.routine_preview, name="routine-preview"),  # before <routine_id>
    path("routines/<str:routine_id>", views.routine_detail, name="routine-detail"),
    path("routines/<str:routine_id>/run", views.routine_run_now, name="routine-run"),
    path("routines/<str:routine_id>/runs", views.routine_runs, name="routine-runs"),
]
