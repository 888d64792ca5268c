"""The workers' heartbeats and the jobs' totals in the admin (the jobs themselves: django-tasks-db's
"Task Results", under "Tasks Database Backend")."""

from __future__ import annotations

from django.contrib import admin

from .models import JobStat, JobWorker


@admin.register(JobWorker)
class JobWorkerAdmin(admin.ModelAdmin):
    list_display = ("id", "host", "pid", "lanes", "started_at", "beat_at")
    readonly_fields = ("id", "host", "pid", "lanes", "started_at", "beat_at")
    ordering = ("-beat_at",)


@admin.register(JobStat)
class JobStatAdmin(admin.ModelAdmin):
    list_display = ("task", "outcome", "count", "seconds")
    list_filter = ("task", "outcome")
    readonly_fields = ("task", "outcome", "count", "seconds", "buckets")
