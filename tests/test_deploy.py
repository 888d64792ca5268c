"""Production settings: `manage.py check --deploy` is clean behind an HTTPS proxy with a real secret."""

from __future__ import annotations

import os
import secrets
import subprocess

import pytest
from django.test import Client

from tests.live_server import PYTHON, ROOT


def _check_deploy(tmp_path, **env) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("NAVI_", "SECRET_KEY", "DEBUG", "SECURE_"))}
    base.update(DJANGO_SETTINGS_MODULE="navi_project.settings", STATIC_ROOT=str(tmp_path / "static"), **env)
    return subprocess.run(
        [PYTHON, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT, env=base, capture_output=True, text=True, timeout=120,
    )


def test_check_deploy_passes_behind_https_with_a_real_secret(tmp_path):
    result = _check_deploy(tmp_path, NAVI_HTTPS="true", DEBUG="false", SECRET_KEY=secrets.token_urlsafe(50))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues" in result.stdout
    assert "WARNING" not in result.stdout + result.stderr


def test_check_deploy_still_catches_a_weak_secret(tmp_path):
    result = _check_deploy(tmp_path, NAVI_HTTPS="true", DEBUG="false", SECRET_KEY="short")
    assert result.returncode != 0 and "security.W009" in result.stdout + result.stderr


@pytest.fixture
def https_settings(settings):
    """What NAVI_HTTPS=true sets, in this process."""
    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    settings.SECURE_SSL_REDIRECT = True
    settings.SECURE_REDIRECT_EXEMPT = [r"^health$", r"^metrics$"]
    return settings


@pytest.mark.django_db
def test_behind_https_plain_http_is_redirected_but_health_is_not(https_settings, profiles):
    client = Client()
    response = client.get("/login/")
    assert response.status_code == 301 and response["Location"] == "https://testserver/login/"
    assert client.get("/login/", HTTP_X_FORWARDED_PROTO="https").status_code == 200  # through the proxy
    assert client.get("/health").status_code == 200  # a local monitor on the worker port
