"""Routines and their runs in the admin (every user's). A schedule changed here is validated
like one sent to the API, and the routine's next slot is computed from the change."""

from __future__ import annotations

from django import forms
from django.conf import settings
from django.contrib import admin
from django.utils import timezone

from . import schedule as sched
from . import services
from .models import Routine, RoutineRun


class RoutineForm(forms.ModelForm):
    class Meta:
        model = Routine
        fields = "__all__"

    def clean(self):
        data = super().clean()
        try:
            sched.parse(data.get("schedule"), data.get("time_zone") or settings.TIME_ZONE, now=timezone.now(),
                        min_interval_s=int(settings.ROUTINE_MIN_INTERVAL_S))
        except sched.ScheduleError as exc:
            raise forms.ValidationError(str(exc)) from None
        return data


class RunInline(admin.TabularInline):
    model = RoutineRun
    extra = 0
    fields = ("scheduled_for", "status", "started_at", "finished_at", "error", "session")
    readonly_fields = fields
    ordering = ("-scheduled_for",)
    show_change_link = True
    max_num = 0


@admin.register(Routine)
class RoutineAdmin(admin.ModelAdmin):
    form = RoutineForm
    list_display = ("name", "owner", "schedule", "time_zone", "enabled", "next_fire_at")
    list_filter = ("enabled", "owner")
    search_fields = ("name", "instruction")
    readonly_fields = ("next_slot", "next_fire_at", "created_at", "updated_at")
    raw_id_fields = ("session",)
    inlines = [RunInline]

    def save_model(self, request, obj, form, change):
        changed = not change or {"schedule", "time_zone", "anchor", "enabled", "jitter_s"} & set(form.changed_data)
        obj.updated_at = timezone.now()
        super().save_model(request, obj, form, change)
        if changed:  # like the API: a changed schedule starts from now
            services._schedule_next(obj, timezone.now())
            obj.save(update_fields=["next_slot", "next_fire_at"])


@admin.register(RoutineRun)
class RoutineRunAdmin(admin.ModelAdmin):
    list_display = ("routine", "scheduled_for", "status", "manual", "started_at", "finished_at", "lateness_s")
    list_filter = ("status", "manual")
    search_fields = ("routine__name", "error")
    raw_id_fields = ("routine", "session")
