"""Structured logs: `LOG_FORMAT=json` prints one JSON object per line.

Every record passes `ContextFilter`, which stamps it with the run and session of the run in
flight (`bind_run`, called where a run starts) and the id of the HTTP request being served
(`RequestIdMiddleware`). Context variables carry both, so lines logged by tools in worker
threads and by Django's own request logging get them too.
"""

from __future__ import annotations

import json
import logging
import re
import uuid
from contextvars import ContextVar
from datetime import datetime, timezone
from typing import Any, Callable

current_log_run: ContextVar[tuple[str, str] | None] = ContextVar("current_log_run", default=None)
current_request_id: ContextVar[str] = ContextVar("current_request_id", default="")

# A client's X-Request-ID is kept only when it is short and plain (it ends up in log lines).
SANE_REQUEST_ID = re.compile(r"[A-Za-z0-9._:/+=@-]{1,128}")
# LogRecord attributes that are not "extras" (whatever `extra=` adds is printed too).
_STANDARD_ATTRS = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}
_CONTEXT_ATTRS = ("run_id", "session_id", "request_id")


def request_id_for(given: str | None) -> str:
    """The client's X-Request-ID when sane, else a new id."""
    return given if given and SANE_REQUEST_ID.fullmatch(given) else uuid.uuid4().hex


def bind_run(run_id: str, session_id: str) -> None:
    """Stamp every line logged from here on in this context (the run's task) with the run."""
    current_log_run.set((run_id, str(session_id)))


class ContextFilter(logging.Filter):
    """Adds `run_id`, `session_id` and `request_id` (empty outside a run or request)."""

    def filter(self, record: logging.LogRecord) -> bool:
        run_id, session_id = current_log_run.get() or ("", "")
        record.run_id = getattr(record, "run_id", "") or run_id
        record.session_id = getattr(record, "session_id", "") or session_id
        record.request_id = getattr(record, "request_id", "") or current_request_id.get()
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, then the context and extras."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, timezone.utc).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in _CONTEXT_ATTRS:
            if getattr(record, name, ""):
                entry[name] = getattr(record, name)
        for name, value in vars(record).items():
            if name not in _STANDARD_ATTRS and name not in entry and name not in _CONTEXT_ATTRS:
                entry[name] = value
        if record.exc_info:
            entry["exc_info"] = self.formatException(record.exc_info)
        if record.stack_info:
            entry["stack_info"] = self.formatStack(record.stack_info)
        return json.dumps(entry, default=str, ensure_ascii=False)


class RequestIdMiddleware:
    """Gives each HTTP request an id: the client's `X-Request-ID` when sane, else a new one. It
    is on every line logged while the request is served and in the response's X-Request-ID."""

    def __init__(self, get_response: Callable):
        self.get_response = get_response

    def __call__(self, request):
        from django.utils.log import log_response

        request_id = request_id_for(request.headers.get("X-Request-ID"))
        request.request_id = request_id
        token = current_request_id.set(request_id)
        try:
            response = self.get_response(request)
            # Django logs 4xx/5xx ("Not Found: /x") after the middleware chain returns, when
            # the id is reset; logged here (same text), Django skips its own line.
            if response.status_code >= 400:
                log_response("%s: %s", response.reason_phrase, request.path, response=response, request=request)
        finally:
            current_request_id.reset(token)
        response.headers["X-Request-ID"] = request_id
        return response


class JsonAccessLog:
    """daphne's access log (an "action logger") as log records of `navi_project.access`, so with
    LOG_FORMAT=json they are JSON lines too; HTTP lines carry the response's X-Request-ID."""

    log = logging.getLogger("navi_project.access")

    def __call__(self, protocol: str, action: str, details: dict) -> None:
        if protocol == "http" and action == "complete":
            self.log.info(
                "%s %s %s", details["method"], details["path"], details["status"],
                extra={"method": details["method"], "path": details["path"], "status": details["status"],
                       "size": details["size"], "client": details["client"],
                       "duration_ms": round(details["time_taken"] * 1000, 1)},
            )
        elif protocol == "websocket":
            self.log.info("WS %s %s", action, details.get("path", ""), extra={"client": details.get("client")})
