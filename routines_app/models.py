"""Routines (a user's scheduled instructions) and their runs, one row per slot.

Exactly once: a slot is claimed by inserting its RoutineRun, unique per (routine,
scheduled_for), before anything runs. `next_slot` / `next_fire_at` say what the scheduler looks
at next; only the scheduler moves them, after the claim (listing never does).
"""

from __future__ import annotations

from datetime import datetime

from django.conf import settings
from django.db import models
from django.utils import timezone

from . import schedule as sched


class Routine(models.Model):
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="routines")
    name = models.CharField(max_length=200)
    instruction = models.TextField(help_text="The message the agent runs at each slot.")
    # The REST shape: {"at": ISO} | {"cron": "m h dom mon dow"} | {"every_s": N}.
    schedule = models.JSONField()
    # The plain words the schedule was made from ("every weekday at 8"), shown on its card; "" = none.
    words = models.CharField(max_length=200, blank=True, default="")
    anchor = models.DateTimeField(default=timezone.now, help_text="Intervals count from here (UTC).")
    time_zone = models.CharField(max_length=64)
    profile = models.ForeignKey(settings.NAVI_PROFILE_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                related_name="+", help_text="Empty: the owner's default profile.")
    enabled = models.BooleanField(default=True)
    catch_up_s = models.PositiveIntegerField(default=6 * 3600)
    jitter_s = models.PositiveIntegerField(default=0)
    # The chat every run of this routine writes in (one per routine; made again if deleted).
    session = models.ForeignKey("sessions_app.Session", null=True, blank=True, on_delete=models.SET_NULL,
                                related_name="+")
    # Made by the agent in a chat that had read untrusted content: what it had read ("" = the
    # owner's own). Its runs start tainted until the owner confirms it (PATCH {"untrusted": false}).
    tainted_by = models.TextField(blank=True)
    source_session = models.ForeignKey("sessions_app.Session", null=True, blank=True, on_delete=models.SET_NULL,
                                       related_name="+", help_text="The chat the agent made it in.")
    # The slot the scheduler handles next and when it fires (slot + jitter); NULL = no more slots.
    next_slot = models.DateTimeField(null=True, blank=True)
    next_fire_at = models.DateTimeField(null=True, blank=True, db_index=True)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["owner", "name", "id"]
        indexes = [models.Index(fields=["enabled", "next_fire_at"], name="routine_due_idx")]

    def __str__(self) -> str:
        return self.name

    def parsed(self) -> sched.Schedule:
        """The stored schedule as a Schedule (it was validated when saved)."""
        (key, value), = self.schedule.items()
        if key == "at":
            return sched.Schedule("at", at=datetime.fromisoformat(value).astimezone(sched.UTC), tz=self.time_zone)
        if key == "cron":
            return sched.Schedule("cron", cron=value, tz=self.time_zone)
        return sched.Schedule("every", every_s=int(value), tz=self.time_zone, anchor=self.anchor)

    def fire_time(self, slot: datetime) -> datetime:
        return slot + sched.jitter(self.pk, slot, self.jitter_s)


class RoutineRun(models.Model):
    class Status(models.TextChoices):
        RUNNING = "running"
        OK = "ok"
        FAILED = "failed"
        STOPPED = "stopped"
        INTERRUPTED = "interrupted"
        MISSED = "missed"
        WAITING_APPROVAL = "waiting_approval"

    LIVE = (Status.RUNNING, Status.WAITING_APPROVAL)

    routine = models.ForeignKey(Routine, on_delete=models.CASCADE, related_name="runs")
    scheduled_for = models.DateTimeField(help_text="The slot (UTC); a manual run uses the moment it was asked for.")
    manual = models.BooleanField(default=False)
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.RUNNING)
    session = models.ForeignKey("sessions_app.Session", null=True, blank=True, on_delete=models.SET_NULL,
                                related_name="+")
    run_id = models.CharField(max_length=64, blank=True, help_text="The agent run (agent.runs).")
    # Which process runs it and when it last said it is alive: a live run whose heartbeat is
    # stale lost its process (crash) and is marked interrupted, never run again.
    worker_id = models.CharField(max_length=64, blank=True)
    heartbeat = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    lateness_s = models.FloatField(null=True, blank=True, help_text="Started this long after its fire time.")
    error = models.TextField(blank=True, help_text="Why it failed, or a note (ran late, missed slots).")
    deliveries = models.JSONField(default=list, blank=True, help_text="One entry per notification target.")

    class Meta:
        ordering = ["-scheduled_for"]
        constraints = [models.UniqueConstraint(fields=["routine", "scheduled_for"], name="routinerun_one_per_slot")]
        indexes = [models.Index(fields=["status", "heartbeat"], name="routinerun_live_idx")]

    def __str__(self) -> str:
        return f"{self.routine} @ {self.scheduled_for:%Y-%m-%d %H:%M} ({self.status})"

    def as_dict(self) -> dict:
        return {
            "id": self.id,
            "scheduled_for": self.scheduled_for.isoformat(),
            "status": self.status,
            "session_id": str(self.session_id) if self.session_id else None,
            "started_at": self.started_at.isoformat() if self.started_at else None,
            "finished_at": self.finished_at.isoformat() if self.finished_at else None,
            "error": self.error,
            "deliveries": self.deliveries,
            "manual": self.manual,
        }
