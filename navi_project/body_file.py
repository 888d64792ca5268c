"""Django reads a request body from the file the server already spooled it to.

Under `python -m navi_project.serve`, Twisted writes a body of 100 kB or more to a temporary
file on disk as it arrives. Plain daphne then reads that file back into ASGI messages and
queues all of them at once (the whole body in memory, in 8 kB pieces), and Django copies those
into its own spooled file: a 199 MB upload peaked the server at +2.4 GB RSS (issue #26 item 4,
bench/body_limit.py (e)). Instead the server hands the file itself over in the scope
(`scope["extensions"][BODY_FILE]`, one empty body message follows) and `BodyFileASGIHandler`
gives it to the request as its stream: no copy of the body is held in memory.
"""

from __future__ import annotations

import contextvars
from typing import IO

from django.core.exceptions import RequestAborted
from django.core.handlers.asgi import ASGIHandler

BODY_FILE = "navi.body_file"  # scope["extensions"][BODY_FILE]: the spooled body, read from 0

_body_file: contextvars.ContextVar[IO[bytes] | None] = contextvars.ContextVar("navi_body_file", default=None)


class BodyFileASGIHandler(ASGIHandler):
    """Django's ASGI handler; a body file handed over by the server is the request's stream."""

    async def handle(self, scope, receive, send):
        token = _body_file.set((scope.get("extensions") or {}).get(BODY_FILE))
        try:
            await super().handle(scope, receive, send)
        finally:
            _body_file.reset(token)

    async def read_body(self, receive):
        body_file = _body_file.get()
        if body_file is None:  # any other server: Django's own spooling
            return await super().read_body(receive)
        while True:  # the server still sends the (empty) body message(s): wait for the last
            message = await receive()
            if message["type"] == "http.disconnect":
                body_file.close()
                raise RequestAborted()
            if not message.get("more_body", False):
                break
        body_file.seek(0)
        return body_file
