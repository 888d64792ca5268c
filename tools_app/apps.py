from django.apps import AppConfig


class ToolsAppConfig(AppConfig):
    name = "tools_app"
    verbose_name = "Tools"

    def ready(self) -> None:
        from . import signals, toolset  # the modules import models: only once apps are ready

        signals.user_tools_changed.connect(toolset.reload_if_built, dispatch_uid="tools_app.reload_registry")
