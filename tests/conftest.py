"""Shared fixtures: users that matter (owner, other user, anonymous), clients, the test LLM
server, temp dirs for everything the app writes, and a clean channel layer per test."""

from __future__ import annotations

import functools
import subprocess

import pytest
from channels.layers import channel_layers
from django.test import Client

from agent.registry import reset_agent
from sessions_app.models import ApiToken, Session
from tests.live_server import free_port
from tests.live_ws import planning_rule
from tests.llm_server import OLLAMA_SCHEMAS, LLMServer
from tests.mcp_support import flood, local_page, loopback_mcp, mcp_hub, test_server  # noqa: F401 - the MCP tests' fixtures
from tools_app.sandbox import bwrap_binary

PASSWORD = "correct horse battery"

# Modules whose tests run code in the bubblewrap sandbox (code_exec, terminal, user tools). On a
# machine without a working bwrap they are skipped with the reason, like the Redis and Chromium
# tests; their tests about what happens *without* bwrap still run.
SANDBOX_MODULES = {"test_tools_sandbox", "test_tools_trust", "test_tools_selfext", "test_user_tools_refresh"}
NO_SANDBOX = "needs a working bubblewrap sandbox: `sudo apt-get install bubblewrap` (.ci/run does this)"


@functools.cache
def sandbox_works() -> bool:
    """bwrap is installed and may create namespaces here (containers often forbid it)."""
    bwrap = bwrap_binary()
    if bwrap is None:
        return False
    try:
        probe = subprocess.run([bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--unshare-all", "true"],
                               capture_output=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return probe.returncode == 0


def pytest_collection_modifyitems(config, items) -> None:
    if sandbox_works():
        return
    for item in items:
        if item.module.__name__.rpartition(".")[2] in SANDBOX_MODULES and "without_bwrap" not in item.name:
            item.add_marker(pytest.mark.skip(reason=NO_SANDBOX))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Elsewhere, a test that failed only because the sandbox is missing is reported as skipped."""
    outcome = yield
    report = outcome.get_result()
    if report.failed and call.excinfo is not None and not sandbox_works():
        if "bubblewrap" in str(call.excinfo.value) or "bubblewrap" in str(report.longrepr):
            report.outcome, report.longrepr = "skipped", (str(item.path), item.location[1], f"Skipped: {NO_SANDBOX}")


def pytest_configure(config) -> None:
    """The in-process test database on PostgreSQL runs without the connection pool: a pool
    opened before pytest-django renames the database to its test_ copy keeps handing out
    connections to the empty real one ("relation agent_profile does not exist" in later tests).
    Live servers the tests start read their own settings and keep the pool."""
    from django.conf import settings as django_settings

    default = django_settings.DATABASES["default"]
    if "postgresql" in default["ENGINE"]:
        (default.get("OPTIONS") or {}).pop("pool", None)


@pytest.fixture(scope="session", autouse=True)
def _postgres_test_database_can_be_dropped(request, django_db_blocker):
    """On PostgreSQL the test database is dropped at the end, which fails while a connection
    opened by a background thread of a test is still alive: end those first."""
    from django.conf import settings as django_settings

    if "postgresql" not in django_settings.DATABASES["default"]["ENGINE"]:
        yield
        return
    request.getfixturevalue("django_db_setup")  # set up before, so torn down after this
    yield
    from django.db import connection

    with django_db_blocker.unblock(), connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )


@pytest.fixture(autouse=True)
def _isolated_dirs(settings, tmp_path):
    """Everything the app writes goes under the test's temp dir."""
    settings.NAVI_WORKSPACE = tmp_path / "workspace"
    settings.SESSION_FILES_DIR = tmp_path / "session_files"
    settings.KNOWLEDGE_DIR = tmp_path / "knowledge_files"
    settings.TOOLS_DIR = tmp_path / "user_tools"
    settings.TOOLS_DIR.mkdir()
    settings.NAVI_WORKSPACE.mkdir()
    settings.FS_ALLOWED_PATHS = str(settings.NAVI_WORKSPACE)  # the default: the run's own workspace
    settings.NAVI_PERSONA = "You are Navi (test persona)."
    settings.OLLAMA_HOST = "http://127.0.0.1:9"  # nothing listens: a test that needs an LLM asks for one
    settings.OLLAMA_THINK = True
    settings.OLLAMA_NUM_CTX = 8192
    settings.ALLOWED_HOSTS = ["testserver", "localhost", "127.0.0.1"]
    # A test that meets an approval it did not expect fails in seconds, not after 10 minutes.
    settings.APPROVAL_TIMEOUT_S = 20
    # A saved fact's vector is a job (knowledge_app.tasks.embed_fact): tests that do not look at
    # facts' vectors (the `embed` fixture of test_knowledge does) do not queue one.
    settings.KNOWLEDGE_EMBED_FACTS = False
    from agent.web.health import _llm_probe_cache

    _llm_probe_cache.clear()  # /health caches the LLM probe; each test has its own LLM
    reset_agent()
    yield
    reset_agent()


@pytest.fixture(autouse=True)
def _fresh_channel_layer():
    """Channel layers hold asyncio queues bound to one event loop; each test gets its own."""
    channel_layers.backends.clear()
    yield
    channel_layers.backends.clear()


@pytest.fixture(autouse=True)
def _fresh_schema_probe():
    """Each test's LLM server is probed for schema support anew (a port may be reused)."""
    from agent.toolcalling import support

    support.forget_support()
    yield
    support.forget_support()


@pytest.fixture(autouse=True)
def _fresh_model_choice():
    """Each test reads the owner's connections and its server's models anew (a port may be reused)."""
    from agent.llm import choice
    from navi_project import connections

    connections.reset()
    choice.forget_listings()
    yield
    connections.reset()
    choice.forget_listings()


@pytest.fixture
def llm(settings):
    """The protocol-level test LLM server, wired in as both Ollama and the OpenAI backend."""
    server = LLMServer().start()
    settings.OLLAMA_HOST = server.url
    settings.OPENAI_BASE_URL = server.openai_url
    settings.OPENAI_API_KEY = "test-key"
    yield server
    server.stop()


@pytest.fixture
def profiles(django_db_blocker):
    """The seeded profiles. Transactional tests flush tables, data migrations included, so
    they are re-seeded from the migration itself when missing."""
    import importlib

    from django.apps import apps

    from agent.models import Profile

    with django_db_blocker.unblock():
        if not Profile.objects.exists():
            importlib.import_module("agent.migrations.0002_seed_profiles").seed(apps, None)
        # Tests script the planning call where a profile plans; `auto` (skip it for short
        # requests) has its own tests in test_small_models.
        Profile.objects.update(planning=Profile.Planning.ALWAYS)
    return list(Profile.objects.all())


@pytest.fixture
def no_planning(profiles):
    """Profiles that never plan: a test's scripted turns are answers, not plans."""
    from agent.models import Profile

    Profile.objects.update(planning_enabled=False)


@pytest.fixture
def owner(django_user_model, profiles):
    """The owner: a superuser, so it holds tools_app.run_host_tools like `make run`'s account."""
    return django_user_model.objects.create_superuser("owner", password=PASSWORD)


@pytest.fixture
def host_tools_allowed(profiles):
    """Every profile runs host tools without asking (tests that script them end to end)."""
    from agent.models import Profile
    from tools_app.permissions import HOST_TOOLS

    policy = {name: "allow" for name in [*HOST_TOOLS, "filesystem", "http_request"]}
    Profile.objects.update(tool_policy=policy)


@pytest.fixture
def other_user(django_user_model):
    return django_user_model.objects.create_user("mallory", password=PASSWORD)


@pytest.fixture
def owner_client(owner) -> Client:
    client = Client()
    client.force_login(owner)
    return client


@pytest.fixture
def anon_client() -> Client:
    return Client()


@pytest.fixture
def owner_token(owner) -> str:
    return ApiToken.issue(owner, name="tests")[1]


@pytest.fixture
def session(owner) -> Session:
    return Session.objects.create(owner=owner, profile_id="secretary")


@pytest.fixture(scope="module")
def llm_live():
    """One test LLM server for a module of live tests, on a fixed port so a test can stop and
    restart it."""
    server = LLMServer(port=free_port()).start()
    yield server
    server.stop()


@pytest.fixture
def live_llm(llm_live):
    """The module's LLM server, reset for this test, answering planning calls with DIRECT."""
    llm_live.reset()
    llm_live.models = None
    llm_live.schemas = set(OLLAMA_SCHEMAS)  # a test may have turned them off
    if llm_live._httpd is None:  # a failed test left it stopped
        llm_live.start()
    llm_live.add_rule(planning_rule())
    return llm_live


KNOWLEDGE_WAIT_S = 60


@pytest.fixture
def knowledge_state():
    """knowledge_app's per-process state forgotten around the test (the embedding model found,
    the vector store's check, the backfill's last look); the jobs it queued run to their end
    after it (the engine's worker loop, in this thread: jobs_app.worker.drain)."""
    from jobs_app.worker import drain
    from knowledge_app import embeddings, indexer, vectors

    embeddings.forget()
    vectors.forget()
    indexer._last_check["at"] = 0.0
    yield
    assert drain(KNOWLEDGE_WAIT_S), "background jobs did not finish"
    embeddings.forget()
    vectors.forget()  # a test may have found no vector index: later tests look again


@pytest.fixture
def embed(llm, settings):
    """The test LLM server, serving embeddings as Ollama does; saved facts get their vectors."""
    settings.KNOWLEDGE_EMBED_FACTS = True
    return llm
