"""ASGI entry point: HTTP through Django, WebSockets through Channels.

    ProtocolTypeRouter
      http      → body size limit → /mcp: Navi's MCP endpoint (agent.web.mcp_server); else Django
      websocket → cookie/Bearer auth → Origin check → URLRouter(agent.web.routing)

Under `python -m navi_project.serve` (daphne with limits at the protocol level) oversized
bodies never get this far; the ASGI body limit is the guard under any other server.
"""

from __future__ import annotations

import os

import django

from navi_project.body_file import BodyFileASGIHandler

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "navi_project.settings")
django.setup(set_prefix=False)  # as get_asgi_application(): the app registry before the consumers
django_asgi_app = BodyFileASGIHandler()  # reads a body the server spooled to disk in place

from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from django.conf import settings  # noqa: E402

from agent.web.mcp_server import endpoint as mcp_endpoint  # noqa: E402
from agent.web.routing import websocket_urlpatterns  # noqa: E402
from navi_project.origin import header, origin_allowed  # noqa: E402
from sessions_app.auth import WebSocketAuthStack  # noqa: E402
from sessions_app.bodylimit import BodyLimitMiddleware  # noqa: E402


async def _close_forbidden_origin(scope, receive, send) -> None:
    """Accept then close with 4403 so the client learns why (a refused handshake says nothing)."""
    message = await receive()
    if message["type"] == "websocket.connect":
        await send({"type": "websocket.accept"})
        await send({"type": "websocket.close", "code": 4403})


class OriginCheck:
    """The handshake's Origin must be this server's own origin or a CSRF_TRUSTED_ORIGINS entry
    (navi_project.origin), for cookie and token sockets alike. Browsers always send Origin; a
    missing one is only accepted from Bearer-token clients (scripts), which a cross-site page
    cannot forge."""

    def __init__(self, application):
        self.application = application

    async def __call__(self, scope, receive, send):
        origin = header(scope, b"origin")
        if origin is None and scope.get("navi_token_auth"):
            return await self.application(scope, receive, send)
        if origin is not None and origin_allowed(scope, origin):
            return await self.application(scope, receive, send)
        return await _close_forbidden_origin(scope, receive, send)


class MCPRoute:
    """`/mcp` is Navi's own MCP endpoint (the SDK's streamable-HTTP app, agent.web.mcp_server);
    every other path is Django's (`/mcp/servers` included)."""

    def __init__(self, application):
        self.application = application

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and scope.get("path") in ("/mcp", "/mcp/"):
            return await mcp_endpoint(scope, receive, send)
        return await self.application(scope, receive, send)


application = ProtocolTypeRouter(
    {
        "http": BodyLimitMiddleware(MCPRoute(django_asgi_app)),
        "websocket": WebSocketAuthStack(OriginCheck(URLRouter(websocket_urlpatterns))),
    }
)

if not settings.TESTING:
    from navi_project.startup import on_server_start

    on_server_start()
