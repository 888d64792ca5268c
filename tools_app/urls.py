"""REST paths of tools_app: MCP servers (DESIGN §9), kept file versions."""

from __future__ import annotations

from django.urls import path

from tools_app import file_views
from tools_app.mcp import views

urlpatterns = [
    path("mcp/servers", views.servers, name="mcp-servers"),
    path("mcp/servers/import", views.servers_import, name="mcp-servers-import"),
    path("mcp/servers/<int:server_id>", views.server_detail, name="mcp-server"),
    path("mcp/servers/<int:server_id>/test", views.server_test, name="mcp-server-test"),
    path("mcp/servers/<int:server_id>/resource", views.server_resource, name="mcp-server-resource"),
    path("mcp/servers/<int:server_id>/prompt", views.server_prompt, name="mcp-server-prompt"),
    path("files/versions/<str:version_id>/restore", file_views.restore_version, name="file-version-restore"),
]
