"""Who may read GET /metrics (navi_project.metrics keeps the metrics themselves): staff users,
by session or API token, and the METRICS_TOKEN bearer; anyone else gets the 404 of an unknown URL."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse
from prometheus_client import CONTENT_TYPE_LATEST

from navi_project.metrics import PATH, exposition, is_metrics_token
from sessions_app.auth import _bearer, user_for_token


def metrics_view(request: HttpRequest) -> HttpResponse:
    """Staff users (session or API token) or the METRICS_TOKEN bearer; anyone else gets the
    same 404 as an unknown URL, so the endpoint is not advertised."""
    allowed = getattr(request, "navi_metrics_token", False) or (request.user.is_authenticated and request.user.is_staff)
    if not allowed or request.method not in ("GET", "HEAD"):
        return JsonResponse({"error": f"nothing at {request.path}"}, status=404)
    return HttpResponse(exposition(), content_type=CONTENT_TYPE_LATEST)


class MetricsTokenMiddleware:
    """Before BearerTokenMiddleware: on /metrics, the METRICS_TOKEN bearer is not an API token
    (which would be a 401 there); mark the request and take the header away. Any other bearer
    on /metrics that is not a staff member's API token gets the 404 of an unknown URL."""

    def __init__(self, get_response) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.path != PATH or "Authorization" not in request.headers:
            return self.get_response(request)
        if is_metrics_token(request.headers.get("Authorization")):
            request.navi_metrics_token = True
            request.META.pop("HTTP_AUTHORIZATION", None)
            request.__dict__.pop("headers", None)  # a cached_property built from META
            return self.get_response(request)
        raw = _bearer(request.headers["Authorization"])
        user = user_for_token(raw) if raw else None
        if user is None or not user.is_staff:
            return JsonResponse({"error": f"nothing at {request.path}"}, status=404)
        return self.get_response(request)
