"""Maintenance commands: `cleanup_files` (TTL of session files) and `extract_memory` errors."""

from __future__ import annotations

import os
import time
import uuid

import pytest
from django.core.management import CommandError, call_command

from sessions_app import cleanup
from sessions_app.models import Session, SessionFile

pytestmark = pytest.mark.django_db


def _folder(settings, session_id, hours_old: float, files=("a.txt",)):
    folder = settings.SESSION_FILES_DIR / str(session_id)
    folder.mkdir(parents=True)
    stamp = time.time() - hours_old * 3600
    for name in files:
        (folder / name).write_text("x")
        os.utime(folder / name, (stamp, stamp))
    os.utime(folder, (stamp, stamp))
    return folder


class TestCleanupFiles:
    def test_it_deletes_folders_older_than_the_ttl_and_their_rows(self, settings, owner, capsys):
        settings.SESSION_FILES_TTL_HOURS = 24
        old_session = Session.objects.create(owner=owner, profile_id="secretary")
        new_session = Session.objects.create(owner=owner, profile_id="secretary")
        old = _folder(settings, old_session.pk, 30)
        new = _folder(settings, new_session.pk, 2)
        SessionFile.objects.create(session=old_session, name="a.txt", path=str(old / "a.txt"))
        SessionFile.objects.create(session=new_session, name="a.txt", path=str(new / "a.txt"))
        call_command("cleanup_files")
        assert not old.exists() and new.exists()
        assert list(SessionFile.objects.values_list("session_id", flat=True)) == [new_session.pk]
        assert "1 folder(s) deleted" in capsys.readouterr().out
        assert Session.objects.count() == 2  # the sessions themselves stay

    def test_a_recent_file_keeps_an_old_folder(self, settings):
        folder = _folder(settings, uuid.uuid4(), 30)
        (folder / "fresh.txt").write_text("new")
        call_command("cleanup_files")
        assert folder.exists()

    def test_dry_run_deletes_nothing(self, settings, capsys):
        folder = _folder(settings, uuid.uuid4(), 48)
        call_command("cleanup_files", "--dry-run")
        assert folder.exists()
        out = capsys.readouterr().out
        assert "would delete" in out and str(folder) in out

    def test_it_only_touches_session_folders(self, settings):
        stray = settings.SESSION_FILES_DIR / "not-a-session"
        stray.mkdir(parents=True)
        os.utime(stray, (0, 0))
        target = settings.SESSION_FILES_DIR.parent / "outside"
        target.mkdir()
        link = settings.SESSION_FILES_DIR / str(uuid.uuid4())
        link.symlink_to(target)
        assert cleanup.cleanup_session_files(now=time.time() + 10 * 365 * 86400) == []
        assert stray.exists() and target.exists()

    def test_a_missing_files_dir_is_fine(self, settings, capsys):
        call_command("cleanup_files")
        assert "0 folder(s) deleted" in capsys.readouterr().out


class TestExtractMemoryCommand:
    def test_an_unknown_session_is_a_clear_error(self):
        with pytest.raises(CommandError, match="no session"):
            call_command("extract_memory", "--session", "nope")

    def test_nothing_stale_reports_zero(self, owner, capsys):
        Session.objects.create(owner=owner, profile_id="secretary")
        call_command("extract_memory")
        assert "0 session(s) processed" in capsys.readouterr().out


def test_the_cleanup_is_a_job_worker_check_not_a_web_server_thread():
    from jobs_app import schedule
    from navi_project.startup import server_started

    assert "session files past their TTL" in schedule._entries  # queued by the job workers, hourly
    assert not any("cleanup" in key[0] for key, *_ in server_started.receivers)
