from django.apps import AppConfig
from django.db import connections
from django.db.backends.signals import connection_created
from django.db.models.signals import post_migrate

from navi_project.jsonsafe import install, on_connection_created


class SessionsAppConfig(AppConfig):
    name = "sessions_app"
    verbose_name = "Chat sessions"

    def ready(self) -> None:
        from jobs_app import schedule
        from navi_project import connections as live_connections
        from navi_project import netguard

        from . import tasks  # these modules import models: only once apps are ready
        from .allowed_hosts import listed
        from .cleanup import CLEANUP_INTERVAL_S
        from .connections import read_stored
        from .search import ensure_search_index_after_migrate

        post_migrate.connect(ensure_search_index_after_migrate, sender=self, dispatch_uid="sessions_app_search_index")
        schedule.every(CLEANUP_INTERVAL_S, "session files past their TTL", tasks.queue_cleanup)  # a job worker's check
        netguard.register_allowed_hosts(listed)  # Settings → Hosts on your network
        live_connections.register_source(read_stored)  # Settings → Connections (the owner's servers and models)
        # Every JSON field is made finite on its way to the database (no NaN or Infinity rows).
        connection_created.connect(on_connection_created, dispatch_uid="navi_project.jsonsafe")
        for alias in connections:  # their backends now, before any statement is prepared
            install(connections[alias])
