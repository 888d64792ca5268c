from django.urls import path

from . import pwa, views

urlpatterns = [
    path("settings/notify", views.targets, name="notify-targets"),
    path("settings/notify/<str:target_id>", views.target_detail, name="notify-target"),
    path("settings/notify/<str:target_id>/test", views.target_test, name="notify-target-test"),
    # The PWA: both at the root, so the service worker's scope is the whole site.
    path("manifest.webmanifest", pwa.manifest, name="webmanifest"),
    path("sw.js", pwa.service_worker, name="service-worker"),
]
