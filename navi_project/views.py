"""Project-level JSON error handlers (CSRF failure, 404). /health is agent.web.health."""

from __future__ import annotations

from django.http import HttpRequest, JsonResponse


def csrf_failure(request: HttpRequest, reason: str = "") -> JsonResponse:
    return JsonResponse(
        {"error": f"CSRF check failed ({reason}); reload the page, or use a Bearer token from a script"},
        status=403,
    )


def not_found(request: HttpRequest, exception: Exception | None = None) -> JsonResponse:
    return JsonResponse({"error": f"nothing at {request.path}"}, status=404)
