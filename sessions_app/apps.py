from django.apps import AppConfig
from django.db.models.signals import post_migrate


def _ensure_search_index(sender, using="default", **kwargs) -> None:
    """A later migration that rebuilds the message or session table (SQLite) drops the FTS
    triggers; put them back and refill the index."""
    from django.db import connections

    from .search import ensure_search_index

    ensure_search_index(connections[using])


class SessionsAppConfig(AppConfig):
    name = "sessions_app"
    verbose_name = "Chat sessions"

    def ready(self) -> None:
        post_migrate.connect(_ensure_search_index, sender=self, dispatch_uid="sessions_app_search_index")
