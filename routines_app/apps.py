from django.apps import AppConfig
from django.db.models.signals import post_delete, post_save

from navi_project.startup import server_started


class RoutinesConfig(AppConfig):
    name = "routines_app"
    verbose_name = "Routines"

    def ready(self) -> None:
        # Imported here, not at the top: these modules import models (Django's app-loading rule).
        from routines_app import scheduler, startup, tools
        from routines_app.models import Routine

        tools.register()  # schedule_routine, list_routines, cancel_routine
        server_started.connect(startup.on_server_started, dispatch_uid="routines_app.scheduler")
        # A routine created or changed in this process: the scheduler looks again at once.
        post_save.connect(scheduler.wake_all, sender=Routine, dispatch_uid="routines_app.wake_on_save")
        post_delete.connect(scheduler.wake_all, sender=Routine, dispatch_uid="routines_app.wake_on_delete")
