"""Project-wide HTTP middleware."""

from __future__ import annotations

from typing import Callable

from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.utils.cache import patch_vary_headers

# No inline scripts, no remote scripts or images: model output that slips through sanitising
# still cannot run code or phone home. Admin pages need inline styles, so styles are relaxed.
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data: blob:; connect-src 'self'; object-src 'none'; base-uri 'self'; "
    "frame-ancestors 'none'; form-action 'self'"
)


class ContentSecurityPolicyMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        response.headers.setdefault("Content-Security-Policy", CSP)
        response.headers.setdefault("Referrer-Policy", "same-origin")
        response.headers.setdefault("X-Content-Type-Options", "nosniff")
        return response


# The pages whose REST path is the same word without the slash (GET /settings is JSON for scripts).
PAGES = frozenset({"/knowledge", "/routines", "/settings", "/memory"})


def wants_page(request: HttpRequest) -> bool:
    """A browser's navigation (Accept names text/html before any JSON), not a script's fetch."""
    accept = request.headers.get("Accept", "")
    if "text/html" not in accept:
        return False
    json_at = accept.find("application/json")
    return json_at < 0 or accept.find("text/html") < json_at


class PageRedirectMiddleware:
    """`/settings` typed into the address bar opens the Settings page (`/settings/`); a script
    asking for JSON (or anything but HTML) still gets the JSON at `/settings`."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.method == "GET" and request.path in PAGES and wants_page(request):
            query = request.META.get("QUERY_STRING", "")
            response = HttpResponseRedirect(f"{request.path}/" + (f"?{query}" if query else ""))
        else:
            response = self.get_response(request)
        if request.path in PAGES:
            patch_vary_headers(response, ["Accept"])
        return response
