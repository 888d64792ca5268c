from __future__ import annotations

from django.apps import AppConfig


class JobsConfig(AppConfig):
    name = "jobs_app"
    verbose_name = "Background jobs"

    def ready(self) -> None:
        # Imported here: these modules import models (Django's app-loading rule).
        from navi_project.metrics import register_collector

        from . import metrics, recovery, schedule, stats

        stats.connect()  # job durations and outcomes, counted by the worker that ran them
        register_collector(metrics.JobsCollector())  # navi_jobs_* on GET /metrics
        schedule.every(3600, "prune job results", stats.prune_results)
        schedule.every(3600, "forget long-dead workers", recovery.forget_long_dead)
