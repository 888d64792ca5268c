"""Settings come from the environment: database, channel layer, persona, secret key."""

from __future__ import annotations

import json
import os
import subprocess

from tests.live_server import PYTHON, ROOT

PRINT = (
    "import json; from django.conf import settings as s; "
    "print(json.dumps({'db': s.DATABASES['default'], 'layer': s.CHANNEL_LAYERS['default'], "
    "'persona': s.NAVI_PERSONA, 'fs': s.FS_ALLOWED_PATHS, 'workspace': str(s.NAVI_WORKSPACE), "
    "'secret': s.SECRET_KEY}, default=str))"
)


def load(tmp_path, **env) -> dict:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("DATABASE_URL", "REDIS_URL", "NAVI_", "DB_PATH", "SECRET_KEY"))}
    base.update({"DJANGO_SETTINGS_MODULE": "navi_project.settings", "NAVI_TESTING": "1", "SECRET_KEY": "k", **env})
    out = subprocess.run([PYTHON, "-c", PRINT], cwd=tmp_path, env={**base, "PYTHONPATH": str(ROOT)},
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def test_sqlite_is_the_default_with_wal_and_a_busy_timeout(tmp_path):
    s = load(tmp_path)
    assert s["db"]["ENGINE"] == "django.db.backends.sqlite3"
    assert s["db"]["NAME"].endswith("navi.db")
    assert "journal_mode=WAL" in s["db"]["OPTIONS"]["init_command"]
    assert s["db"]["OPTIONS"]["timeout"] >= 20
    assert s["db"]["OPTIONS"]["transaction_mode"] == "IMMEDIATE"


def test_db_path_moves_the_sqlite_file(tmp_path):
    assert load(tmp_path, DB_PATH=str(tmp_path / "x.db"))["db"]["NAME"] == str(tmp_path / "x.db")


def test_database_url_switches_to_postgres(tmp_path):
    db = load(tmp_path, DATABASE_URL="postgres://navi:pw@db.local:5433/navi")["db"]
    assert db["ENGINE"] == "django.db.backends.postgresql"
    assert (db["NAME"], db["USER"], db["PASSWORD"], db["HOST"], int(db["PORT"])) == ("navi", "navi", "pw", "db.local", 5433)
    assert "init_command" not in db.get("OPTIONS", {})


def test_the_channel_layer_is_in_memory_without_redis_url(tmp_path):
    assert load(tmp_path)["layer"]["BACKEND"] == "navi_project.inmemory_layer.NaviInMemoryChannelLayer"


def test_redis_url_switches_to_channels_redis(tmp_path):
    layer = load(tmp_path, REDIS_URL="redis://cache.local:6380/2")["layer"]
    assert layer["BACKEND"] == "navi_project.redis_layer.NaviRedisChannelLayer"  # channels_redis's, outage-aware
    assert layer["CONFIG"]["hosts"][0]["address"] == "redis://cache.local:6380/2"
    from channels_redis.core import RedisChannelLayer

    from navi_project.redis_layer import NaviRedisChannelLayer

    assert issubclass(NaviRedisChannelLayer, RedisChannelLayer)


def test_persona_from_a_file_or_inline(tmp_path):
    (tmp_path / "p.txt").write_text("I am a file persona.\n")
    assert load(tmp_path, NAVI_PERSONA_FILE=str(tmp_path / "p.txt"))["persona"] == "I am a file persona."
    assert load(tmp_path, NAVI_PERSONA="inline", NAVI_PERSONA_FILE=str(tmp_path / "p.txt"))["persona"] == "inline"
    assert load(tmp_path)["persona"].startswith("You are Navi")  # the shipped persona.txt


def test_the_filesystem_allowlist_defaults_to_the_workspace_only(tmp_path):
    s = load(tmp_path)
    assert s["fs"] != "*"
    assert s["fs"].split(",") == [s["workspace"]]  # user_tools/ only changes through write_tool


def test_secret_key_file(tmp_path):
    (tmp_path / "key").write_text("from-a-file\n")
    base = load(tmp_path, SECRET_KEY="", SECRET_KEY_FILE=str(tmp_path / "key"))
    assert base["secret"] == "from-a-file"
