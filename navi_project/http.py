"""Small JSON helpers shared by the REST views."""

from __future__ import annotations

import functools
from typing import Any, Callable

from django.http import HttpRequest, HttpResponse, JsonResponse

from navi_project import jsonsafe


class ApiError(Exception):
    """Raised inside a view to answer `{"error": message}` with `status`."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.message = message
        self.status = status


def json_error(message: str, status: int) -> JsonResponse:
    return JsonResponse({"error": message}, status=status)


# json.loads recurses once per nesting level: ~100 000 levels of [[[... exhaust the stack.
NESTED_TOO_DEEP = "request body is JSON nested too deeply to read (thousands of levels); send a flatter object"


def parse_json_body(request: HttpRequest, *, allow_empty: bool = True) -> dict[str, Any]:
    """The request body as a JSON object; an empty body is `{}` when allowed.

    Form-encoded bodies (curl -d, HTML forms) are accepted too, as a flat object.
    """
    if request.content_type in ("multipart/form-data", "application/x-www-form-urlencoded"):
        data = {k: v for k, v in request.POST.items()}
        if data or allow_empty:
            return data
        raise ApiError("request body is empty; send a JSON object", 400)
    if not request.body.strip():
        if allow_empty:
            return {}
        raise ApiError("request body is empty; send a JSON object", 400)
    try:
        data = jsonsafe.loads(request.body)
    except jsonsafe.NonFiniteNumber as exc:
        raise ApiError(f"request body holds a number JSON cannot hold: {exc}", 400) from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise ApiError(f"request body is not valid JSON: {exc}", 400) from None
    except RecursionError:
        raise ApiError(NESTED_TOO_DEEP, 400) from None
    if not isinstance(data, dict):
        raise ApiError("request body must be a JSON object", 400)
    return data


def json_view(*methods: str) -> Callable[[Callable[..., Any]], Callable[..., HttpResponse]]:
    """Allow only `methods` (405 JSON otherwise) and turn ApiError into a JSON error."""

    def decorate(view: Callable[..., Any]) -> Callable[..., HttpResponse]:
        @functools.wraps(view)
        def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            if request.method not in methods:
                response = json_error(
                    f"method {request.method} not allowed here; use {', '.join(methods)}", 405
                )
                response["Allow"] = ", ".join(methods)
                return response
            try:
                return view(request, *args, **kwargs)
            except ApiError as exc:
                return json_error(exc.message, exc.status)

        return wrapper

    return decorate
