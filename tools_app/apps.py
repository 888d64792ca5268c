from django.apps import AppConfig


class ToolsAppConfig(AppConfig):
    name = "tools_app"
    verbose_name = "Tools"

    def ready(self) -> None:
        from navi_project.startup import server_started

        from . import signals, toolset  # the modules import models: only once apps are ready
        from .mcp import client as mcp_client

        signals.user_tools_changed.connect(toolset.reload_if_built, dispatch_uid="tools_app.reload_registry")
        server_started.connect(mcp_client.connect_all, dispatch_uid="tools_app.mcp.connect_all")
