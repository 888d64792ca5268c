"""Session file uploads and downloads: sanitising, size cap, executables, duplicates, ownership."""

from __future__ import annotations

import json

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from sessions_app.files import is_executable, sanitize_filename
from sessions_app.models import Session, SessionFile

pytestmark = pytest.mark.django_db


def _upload(client, session, name, data=b"hello", **extra):
    return client.post(f"/sessions/{session.pk}/files", {"file": SimpleUploadedFile(name, data)}, **extra)


class TestSanitize:
    @pytest.mark.parametrize(
        "raw,expected",
        [
            ("../../etc/passwd", "passwd"),
            ("..\\..\\windows\\win.ini", "win.ini"),
            ("/abs/path/report.pdf", "report.pdf"),
            (".bashrc", "bashrc"),
            ("...", "upload"),
            ("", "upload"),
            ("a\x00b\x1fc.txt", "abc.txt"),
            ("we<ird>:na|me?.txt", "we_ird__na_me_.txt"),
            ("Résumé été.pdf", "Résumé été.pdf"),
        ],
    )
    def test_it_keeps_only_a_safe_base_name(self, raw, expected):
        assert sanitize_filename(raw) == expected

    def test_long_names_are_capped_keeping_the_extension(self):
        name = sanitize_filename("x" * 500 + ".tar.gz")
        assert len(name) == 120 and name.endswith("x.gz")

    def test_trailing_dots_and_spaces_are_dropped(self):
        assert sanitize_filename("x.py.") == "x.py"
        assert sanitize_filename("report.pdf . ") == "report.pdf"
        assert is_executable("x.py. ", b"")

    def test_executables_by_extension_and_by_magic(self):
        assert is_executable("run.SH", b"echo")
        assert is_executable("setup.exe", b"")
        assert is_executable("notes.txt", b"\x7fELF\x02")
        assert is_executable("photo.jpg", b"MZ\x90\x00")
        assert is_executable("readme.md", b"#!/bin/sh")
        assert is_executable("lib.pdf", b"\xcf\xfa\xed\xfe")
        assert not is_executable("report.pdf", b"%PDF-1.7")


class TestUpload:
    def test_it_stores_the_file_under_the_session_folder(self, owner_client, session, settings):
        response = _upload(owner_client, session, "notes.txt", b"some notes")
        assert response.status_code == 201
        body = json.loads(response.content)
        assert body["name"] == "notes.txt" and body["size"] == 10
        path = settings.SESSION_FILES_DIR / str(session.pk) / "notes.txt"
        assert body["path"] == str(path) and path.read_bytes() == b"some notes"
        assert SessionFile.objects.get(session=session).name == "notes.txt"

    def test_the_stored_file_outlives_the_upload_temp_file_and_is_not_world_readable(self, owner_client, session, settings, tmp_path):
        # The temp file is linked into the session folder (same filesystem here), not copied.
        settings.FILE_UPLOAD_TEMP_DIR = str(tmp_path)
        data = b"x" * (3 * 1024 * 1024)  # over FILE_UPLOAD_MAX_MEMORY_SIZE: a temp file on disk
        assert _upload(owner_client, session, "big.txt", data).status_code == 201
        path = settings.SESSION_FILES_DIR / str(session.pk) / "big.txt"
        assert path.read_bytes() == data and path.stat().st_mode & 0o777 == 0o640
        assert not [p for p in tmp_path.iterdir() if p.is_file()]  # the temp name is gone

    def test_a_taken_name_is_not_overwritten_by_a_link(self, owner_client, session, settings):
        folder = settings.SESSION_FILES_DIR / str(session.pk)
        folder.mkdir(parents=True)
        (folder / "a.txt").write_bytes(b"already here")  # on disk, not in the database
        response = _upload(owner_client, session, "a.txt", b"new")
        assert response.status_code == 201 and json.loads(response.content)["name"] == "a_1.txt"
        assert (folder / "a.txt").read_bytes() == b"already here" and (folder / "a_1.txt").read_bytes() == b"new"

    def test_a_traversal_name_stays_inside_the_folder(self, owner_client, session, settings):
        response = _upload(owner_client, session, "../../../evil.txt")
        assert response.status_code == 201
        assert json.loads(response.content)["name"] == "evil.txt"
        assert (settings.SESSION_FILES_DIR / str(session.pk) / "evil.txt").exists()
        assert not (settings.SESSION_FILES_DIR / "evil.txt").exists()

    def test_duplicates_get_numeric_suffixes(self, owner_client, session):
        names = [json.loads(_upload(owner_client, session, "a.txt").content)["name"] for _ in range(3)]
        assert names == ["a.txt", "a_1.txt", "a_2.txt"]

    def test_oversize_files_get_413_and_leave_nothing(self, owner_client, session, settings):
        settings.SESSION_FILES_MAX_SIZE_MB = 1
        response = _upload(owner_client, session, "big.bin.txt", b"x" * (1024 * 1024 + 1))
        assert response.status_code == 413
        assert "SESSION_FILES_MAX_SIZE_MB" in json.loads(response.content)["error"]
        assert not SessionFile.objects.exists()
        folder = settings.SESSION_FILES_DIR / str(session.pk)
        assert not folder.exists() or not any(folder.iterdir())

    def test_a_huge_content_length_is_refused_before_reading(self, owner_client, session, settings):
        settings.SESSION_FILES_MAX_SIZE_MB = 1
        response = owner_client.post(
            f"/sessions/{session.pk}/files", data=b"", content_type="multipart/form-data; boundary=x",
            CONTENT_LENGTH=str(50 * 1024 * 1024),
        )
        assert response.status_code == 413

    @pytest.mark.parametrize(
        "name,data",
        [("cat.jpg", b"\x7fELF\x02\x01\x01" + b"\x00" * 64), ("doc.pdf", b"MZ\x90\x00"), ("notes.txt", b"#!/bin/sh\nrm -rf ~"),
         ("script.sh", b"echo hi"), ("tool.PY", b"print(1)")],
    )
    def test_executables_are_rejected_even_with_a_harmless_extension(self, owner_client, session, name, data):
        response = _upload(owner_client, session, name, data)
        assert response.status_code == 400
        assert "executable" in json.loads(response.content)["error"]
        assert not SessionFile.objects.exists()

    @pytest.mark.parametrize("name", ["x.py.", "x.py ", "x.py. . ", "run.sh...", "x.PY . "])
    def test_it_refuses_executable_names_ending_in_dots_or_spaces(self, owner_client, session, name):
        response = _upload(owner_client, session, name, b"print(1)")
        assert response.status_code == 400, response.content
        assert "executable" in json.loads(response.content)["error"]
        assert not SessionFile.objects.exists()

    def test_another_users_session_is_a_404(self, owner_client, other_user, settings):
        theirs = Session.objects.create(owner=other_user, profile_id="secretary")
        assert _upload(owner_client, theirs, "x.txt").status_code == 404
        assert not (settings.SESSION_FILES_DIR / str(theirs.pk)).exists()

    def test_it_requires_authentication_and_a_file_field(self, anon_client, owner_client, session):
        assert _upload(anon_client, session, "x.txt").status_code == 401
        assert owner_client.post(f"/sessions/{session.pk}/files", {"other": "x"}).status_code == 400
        assert owner_client.post(f"/sessions/{session.pk}/files", {}, content_type="application/json").status_code == 400

    def test_cookie_uploads_need_the_csrf_token_and_bearer_uploads_do_not(self, owner, session, owner_token):
        client = Client(enforce_csrf_checks=True)
        client.force_login(owner)
        assert _upload(client, session, "x.txt").status_code == 403
        token_client = Client(enforce_csrf_checks=True)
        assert _upload(token_client, session, "x.txt", HTTP_AUTHORIZATION=f"Bearer {owner_token}").status_code == 201


class TestDownload:
    def test_the_owner_downloads_as_an_attachment_with_nosniff(self, owner_client, session):
        _upload(owner_client, session, "page.html", b"<script>alert(1)</script>")
        response = owner_client.get(f"/sessions/{session.pk}/files/page.html")
        assert response.status_code == 200
        assert b"".join(response.streaming_content) == b"<script>alert(1)</script>"
        assert response["Content-Disposition"].startswith("attachment")
        assert response["Content-Type"].startswith("text/html")
        assert response["X-Content-Type-Options"] == "nosniff"

    def test_published_files_are_inline_but_never_active_content(self, owner_client, session):
        _upload(owner_client, session, "chart.png", b"\x89PNG\r\n")
        _upload(owner_client, session, "page.html", b"<p>")
        SessionFile.objects.update(published=True)
        assert owner_client.get(f"/sessions/{session.pk}/files/chart.png")["Content-Disposition"].startswith("inline")
        assert owner_client.get(f"/sessions/{session.pk}/files/page.html")["Content-Disposition"].startswith("attachment")

    def test_unknown_names_traversal_and_other_users_are_404(self, owner_client, other_user, session):
        _upload(owner_client, session, "a.txt")
        assert owner_client.get(f"/sessions/{session.pk}/files/nope.txt").status_code == 404
        assert owner_client.get(f"/sessions/{session.pk}/files/..%2F..%2Fsettings.py").status_code == 404
        theirs = Session.objects.create(owner=other_user, profile_id="secretary")
        SessionFile.objects.create(session=theirs, name="a.txt", path=SessionFile.objects.get().path)
        assert owner_client.get(f"/sessions/{theirs.pk}/files/a.txt").status_code == 404
        assert Client().get(f"/sessions/{session.pk}/files/a.txt").status_code == 401

    def test_a_row_pointing_outside_the_folder_is_not_served(self, owner_client, session, tmp_path):
        secret = tmp_path / "secret.txt"
        secret.write_text("secret")
        SessionFile.objects.create(session=session, name="secret.txt", path=str(secret))
        assert owner_client.get(f"/sessions/{session.pk}/files/secret.txt").status_code == 404


def test_deleting_a_session_deletes_its_folder(owner_client, session, settings):
    _upload(owner_client, session, "a.txt")
    folder = settings.SESSION_FILES_DIR / str(session.pk)
    assert folder.exists()
    assert owner_client.delete(f"/sessions/{session.pk}").status_code == 200
    assert not folder.exists()
