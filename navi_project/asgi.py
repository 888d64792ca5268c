"""ASGI entry point: HTTP through Django, WebSockets through Channels.

    ProtocolTypeRouter
      http      → Django
      websocket → cookie/Bearer auth → Origin check → URLRouter(agent.routing)
"""

from __future__ import annotations

import os
from urllib.parse import urlparse

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "navi_project.settings")
django_asgi_app = get_asgi_application()  # populate the app registry before importing consumers

from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator, OriginValidator  # noqa: E402
from django.conf import settings  # noqa: E402

from agent.routing import websocket_urlpatterns  # noqa: E402
from sessions_app.auth import WebSocketAuthStack  # noqa: E402


async def _close_forbidden_origin(scope, receive, send) -> None:
    """Accept then close with 4403 so the client learns why (a refused handshake says nothing)."""
    message = await receive()
    if message["type"] == "websocket.connect":
        await send({"type": "websocket.accept"})
        await send({"type": "websocket.close", "code": 4403})


class OriginCheck(OriginValidator):
    """ALLOWED_HOSTS origin check. Browsers always send Origin; a missing Origin is only
    accepted from Bearer-token clients (scripts), which cross-site pages cannot forge."""

    def __init__(self, application):
        super().__init__(application, [])

    async def __call__(self, scope, receive, send):
        # Read per connection so a settings change (tests, reload) takes effect.
        self.allowed_origins = AllowedHostsOriginValidator(self.application).allowed_origins
        origin = None
        for name, value in scope.get("headers", []):
            if name == b"origin":
                origin = urlparse(value.decode("latin1"))
        if origin is None and scope.get("navi_token_auth"):
            return await self.application(scope, receive, send)
        if origin is not None and self.valid_origin(origin):
            return await self.application(scope, receive, send)
        return await _close_forbidden_origin(scope, receive, send)


application = ProtocolTypeRouter(
    {
        "http": django_asgi_app,
        "websocket": WebSocketAuthStack(OriginCheck(URLRouter(websocket_urlpatterns))),
    }
)

if not settings.TESTING:
    from navi_project.startup import on_server_start

    on_server_start()
