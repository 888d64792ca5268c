"""The web app manifest and the service worker, both at the site root: the worker's scope is
the folder it is served from, and a push subscription belongs to that worker."""

from __future__ import annotations

from pathlib import Path

from django.contrib.staticfiles import finders
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.templatetags.static import static
from django.views.decorators.http import require_GET


@require_GET
def manifest(request: HttpRequest) -> JsonResponse:
    icons = [
        {"src": static("icons/navi-192.png"), "sizes": "192x192", "type": "image/png"},
        {"src": static("icons/navi-512.png"), "sizes": "512x512", "type": "image/png"},
        {"src": static("icons/navi-maskable-512.png"), "sizes": "512x512", "type": "image/png", "purpose": "maskable"},
        {"src": static("favicon.svg"), "sizes": "any", "type": "image/svg+xml"},
    ]
    body = {
        "id": "/",
        "name": "Navi",
        "short_name": "Navi",
        "description": "Your self-hosted AI agent",
        "start_url": "/",
        "scope": "/",
        "display": "standalone",
        "background_color": "#ffffff",
        "theme_color": "#3451d1",
        "icons": icons,
    }
    response = JsonResponse(body, content_type="application/manifest+json")
    response["Cache-Control"] = "no-cache"
    return response


@require_GET
def service_worker(request: HttpRequest) -> HttpResponse:
    path = finders.find("sw.js")
    if not path:
        raise Http404("sw.js is missing from the static files")
    response = HttpResponse(Path(path).read_bytes(), content_type="text/javascript; charset=utf-8")
    # Browsers check for a new worker on navigation; no-cache makes that check see an update at once.
    response["Cache-Control"] = "no-cache"
    response["Service-Worker-Allowed"] = "/"
    return response
