"""Navi settings, driven by environment variables (django-environ reads `.env`).

Every variable is documented in `.env.example`. Defaults are chosen so that one can just check
out the code, run `make run`, and get a working single-process install on SQLite.
"""

from __future__ import annotations

import os
import secrets
import sys
from pathlib import Path

import environ

from navi_project import sqlite_driver

sqlite_driver.install()  # before Django's SQLite backend is imported: sqlite-vec needs it

BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env()
if (BASE_DIR / ".env").is_file():  # optional: every variable has a default
    environ.Env.read_env(BASE_DIR / ".env")

TESTING = "pytest" in sys.modules or env.bool("NAVI_TESTING", default=False)


def _path(value: str) -> Path:
    """Relative paths in settings are relative to the project root, not the cwd."""
    p = Path(value).expanduser()
    return p if p.is_absolute() else (BASE_DIR / p)


def _secret_key() -> str:
    """SECRET_KEY, SECRET_KEY_FILE, or a key generated once and kept in `.navi_secret_key`.

    Persisting the generated key keeps the owner logged in across restarts of `make run`.
    """
    if env.str("SECRET_KEY", default=""):
        return env.str("SECRET_KEY")
    key_file = env.str("SECRET_KEY_FILE", default="")
    if key_file:
        return _path(key_file).read_text().strip()
    generated = BASE_DIR / ".navi_secret_key"
    if not generated.exists():
        _create_private_file(generated, secrets.token_urlsafe(50))
    _owner_only(generated)
    return generated.read_text().strip()


def _owner_only(*paths: Path) -> None:
    """Take group and other access away from existing files (made by an older version, or
    copied in with a loose umask): keys and the database are readable by their owner only."""
    for path in paths:
        try:
            mode = path.stat().st_mode
            if mode & 0o077:
                path.chmod(mode & 0o700)
        except OSError:  # missing, or not ours to change: nothing to tighten
            pass


def _create_private_file(path: Path, content: str) -> None:
    """Write `content` to `path` readable by the owner only, with no moment where the file is
    world-readable or half-written: a 0600 temp file (O_EXCL) is hard-linked into place. If
    another process won the race, its file is kept (both processes then share one key)."""
    temp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w") as out:
            out.write(content)
            out.flush()
            os.fsync(out.fileno())
        os.link(temp, path)
    except FileExistsError:
        pass  # another process created it first: keep its key
    except OSError:  # a filesystem without hard links
        os.rename(temp, path)
    finally:
        temp.unlink(missing_ok=True)


SECRET_KEY = _secret_key()
DEBUG = env.bool("DEBUG", default=False)
ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["127.0.0.1", "localhost"])
CSRF_TRUSTED_ORIGINS = env.list("CSRF_TRUSTED_ORIGINS", default=[])

# Behind an HTTPS reverse proxy: cookies only over HTTPS, HSTS, and the proxy's
# X-Forwarded-Proto says a request was secure. Only switch it on when the proxy sets (and
# overwrites) that header, or a client could claim HTTPS.
NAVI_HTTPS = env.bool("NAVI_HTTPS", default=False)
if NAVI_HTTPS:
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SECURE_HSTS_SECONDS = env.int("SECURE_HSTS_SECONDS", default=31_536_000)
    # HSTS covers the subdomains of Navi's own host name only (the header applies to the host
    # that sends it), so this is safe even when Navi is one subdomain of a home domain.
    SECURE_HSTS_INCLUDE_SUBDOMAINS = env.bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", default=True)
    # Preloading is a promise for a whole registrable domain (the list takes apex domains), which
    # an app on one subdomain cannot make for its owner: opt in, else the check is silenced.
    SECURE_HSTS_PRELOAD = env.bool("SECURE_HSTS_PRELOAD", default=False)
    if not SECURE_HSTS_PRELOAD:
        SILENCED_SYSTEM_CHECKS = ["security.W021"]
    # Plain-HTTP requests that reach Navi without the proxy's header are sent to https://, except
    # the monitoring endpoints a local health check or Prometheus calls on the worker port.
    SECURE_SSL_REDIRECT = env.bool("SECURE_SSL_REDIRECT", default=True)
    SECURE_REDIRECT_EXEMPT = [r"^health$", r"^metrics$"]

INSTALLED_APPS = [
    "daphne",  # must come before staticfiles so `runserver` is the ASGI one
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "channels",
    "agent",
    "sessions_app",
    "memory_app",
    "tools_app",
    "notify_app",
    "knowledge_app",
    "routines_app",
    "messaging_app",
    "voice_app",
    # Before django_tasks_db: its `db_worker` command is jobs_app's (the engine's, with lanes,
    # heartbeats and recovery), and Django takes a command from the first app that has it.
    "jobs_app",
    "django_tasks",
    "django_tasks_db",
]

MIDDLEWARE = [
    # First: every line logged while a request is served carries its id (LOG_FORMAT=json).
    "navi_project.logs.RequestIdMiddleware",
    "django.middleware.security.SecurityMiddleware",
    # WhiteNoise serves /static/ under daphne (no separate web server in the two-command set-up).
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    # After AuthenticationMiddleware (a Bearer token replaces the cookie user) and before
    # CsrfViewMiddleware (token requests are not cookie-borne, so CSRF does not apply to them).
    "sessions_app.metrics_access.MetricsTokenMiddleware",  # the METRICS_TOKEN bearer is not an API token
    "sessions_app.auth.BearerTokenMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "navi_project.middleware.ContentSecurityPolicyMiddleware",
    # Last: /settings, /routines, /memory, /knowledge typed in a browser open the page (scripts get JSON).
    "navi_project.middleware.PageRedirectMiddleware",
]

ROOT_URLCONF = "navi_project.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]
WSGI_APPLICATION = "navi_project.wsgi.application"
ASGI_APPLICATION = "navi_project.asgi.application"

# --- Database -----------------------------------------------------------------------------
# SQLite by default (DB_PATH, as in the original Navi); DATABASE_URL switches to Postgres.
DB_PATH = env.str("DB_PATH", default="navi.db")
DATABASES = {
    "default": env.db_url("DATABASE_URL", default=f"sqlite:///{_path(DB_PATH)}"),
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        {
            # WAL lets readers run while the agent writes; synchronous=NORMAL is safe with WAL.
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
            # Take the write lock at BEGIN so concurrent writers queue (busy timeout) instead of
            # failing mid-transaction with "database is locked".
            "transaction_mode": "IMMEDIATE",
            "timeout": 30,
        }
    )
    # Keep the connection: opening one (file open + the PRAGMAs above) on every request and
    # WebSocket message cost ~5 % of the server's CPU when runs start (issue #14).
    DATABASES["default"]["CONN_MAX_AGE"] = None


def _private_sqlite_file(name: str) -> None:
    """The database file made 0600 before SQLite first opens it (SQLite would make it 0644, and
    its -wal and -shm files take the database file's mode); an existing one is tightened."""
    if not name or name == ":memory:" or name.startswith("file:"):
        return
    path = Path(name)
    if path.parent.is_dir() and not path.exists():
        try:
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))  # empty = an empty database
        except OSError:  # made meanwhile, or a folder we cannot write: SQLite will say so when it opens
            pass
    _owner_only(path, Path(f"{name}-wal"), Path(f"{name}-shm"), Path(f"{name}-journal"))


if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    _private_sqlite_file(str(DATABASES["default"].get("NAME") or ""))

if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql" and env.int("DB_POOL_MAX_SIZE", default=10) > 0:
    # A pool per process (psycopg_pool), checked before each use. Without it Channels closed the
    # connection around every socket event (CONN_MAX_AGE 0): each worker connected ~300 times in
    # a 100-session run, all on the one database thread, so sockets waited past daphne's
    # handshake timeout (issue 36). Kept connections per thread leak under ASGI; a pool does not.
    # DB_POOL_MAX_SIZE=0: no pool (behind PgBouncer, say): a connection per request / socket event.
    DATABASES["default"]["CONN_MAX_AGE"] = 0  # the pool keeps them; Django must not as well
    DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
    DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
        "min_size": env.int("DB_POOL_MIN_SIZE", default=2),
        "max_size": env.int("DB_POOL_MAX_SIZE", default=10),
        "timeout": env.float("DB_POOL_TIMEOUT_S", default=30.0),  # waiting for a free connection
        "max_idle": 300.0,
    }

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
# navi_backup's row format: JSON with exact (microsecond) datetimes.
SERIALIZATION_MODULES = {"navijson": "sessions_app.backup_format"}

# --- Channel layer ------------------------------------------------------------------------
# How long a WebSocket handshake may wait for the application's accept (daphne's own default is
# 5 s, which a loaded 2-core machine with 100 sockets connecting at once exceeded).
WEBSOCKET_HANDSHAKE_TIMEOUT_S = env.float("WEBSOCKET_HANDSHAKE_TIMEOUT_S", default=30.0)
# Capacity is high because a fast model streams thousands of deltas; a full channel would
# drop frames (the consumer repairs gaps from the run buffer, but it should not have to).
REDIS_URL = env.str("REDIS_URL", default="")
if REDIS_URL:
    CHANNEL_LAYERS = {
        "default": {
            # channels_redis' layer that rides out a Redis outage or restart (navi_project/redis_layer.py).
            "BACKEND": "navi_project.redis_layer.NaviRedisChannelLayer",
            # redis-py 8 reads time out after 5 s by default, which kills channels_redis' 5 s
            # blocking BZPOPMIN (and with it every idle socket: close 1011); 15 s still catches
            # a dead Redis (django/channels_redis#422).
            "CONFIG": {
                # redis-py's pool holds 100 connections and raises past them: 200 routine runs
                # starting at once failed in group_add (after their chat was claimed) and lost
                # frames. Each connection is a socket while in use, then kept for reuse.
                "hosts": [{"address": REDIS_URL, "socket_timeout": 15,
                           "max_connections": env.int("REDIS_MAX_CONNECTIONS", default=500)}],
                "capacity": 5000,
                "expiry": 60,
            },
        }
    }
else:
    CHANNEL_LAYERS = {
        "default": {
            # Channels' in-memory layer without its per-message scans and tasks (one process).
            "BACKEND": "navi_project.inmemory_layer.NaviInMemoryChannelLayer",
            "CONFIG": {"capacity": 50000, "expiry": 60},
        }
    }

# --- Auth ---------------------------------------------------------------------------------
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
# Failed logins per (username, client IP) within the window before the login answers 429.
# Counted in the database, so every worker process sees the same count.
LOGIN_MAX_FAILURES = env.int("LOGIN_MAX_FAILURES", default=5)
LOGIN_FAILURE_WINDOW_MINUTES = env.int("LOGIN_FAILURE_WINDOW_MINUTES", default=15)
LOGIN_URL = "/login/"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "/login/"
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SAMESITE = "Lax"
CSRF_COOKIE_SAMESITE = "Lax"
CSRF_FAILURE_VIEW = "navi_project.views.csrf_failure"

LANGUAGE_CODE = "en-us"
def _host_time_zone() -> str:
    """The host's IANA time zone (TZ, /etc/timezone or the /etc/localtime link), else UTC: the
    agent's clock and Django's dates follow the machine Navi runs on unless TIME_ZONE says otherwise."""
    import os
    from zoneinfo import ZoneInfo

    candidates = [os.environ.get("TZ", "").lstrip(":")]
    try:
        candidates.append(Path("/etc/timezone").read_text().strip())
    except OSError:
        pass
    link = os.path.realpath("/etc/localtime")
    if "zoneinfo/" in link:
        candidates.append(link.split("zoneinfo/", 1)[1])
    for name in candidates:
        try:
            if name:
                ZoneInfo(name)
                return name
        except (ValueError, KeyError, OSError):
            continue
    return "UTC"


TIME_ZONE = env.str("TIME_ZONE", default="") or _host_time_zone()
USE_I18N = True
USE_TZ = True

STATIC_URL = "/static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = _path(env.str("STATIC_ROOT", default="staticfiles"))
STATIC_ROOT.mkdir(parents=True, exist_ok=True)  # WhiteNoise warns at every start when it is missing
# In development and tests WhiteNoise serves straight from the finders (no collectstatic step).
WHITENOISE_USE_FINDERS = True
WHITENOISE_AUTOREFRESH = DEBUG or TESTING
DATA_UPLOAD_MAX_MEMORY_SIZE = 30 * 1024 * 1024  # JSON bodies with base64 images

LOG_LEVEL = env.str("LOG_LEVEL", default="INFO").upper()
# "plain" (one readable line) or "json" (one JSON object per line, with run/session/request ids).
LOG_FORMAT = env.str("LOG_FORMAT", default="plain").lower()
if LOG_FORMAT not in ("plain", "json"):
    from django.core.exceptions import ImproperlyConfigured

    raise ImproperlyConfigured(f"LOG_FORMAT={LOG_FORMAT!r}: use plain or json")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"context": {"()": "navi_project.logs.ContextFilter"}},
    "formatters": {
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"},
        "json": {"()": "navi_project.logs.JsonFormatter"},
    },
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": LOG_FORMAT, "filters": ["context"]}},
    "root": {"handlers": ["console"], "level": LOG_LEVEL},
    "loggers": {
        "django.channels.server": {"level": "WARNING"},
        "httpx": {"level": "WARNING"},  # one line per LLM request is noise
    },
}

# --- LLM ----------------------------------------------------------------------------------
OLLAMA_HOST = env.str("OLLAMA_HOST", default="http://localhost:11434")
OLLAMA_DEFAULT_MODEL = env.str("OLLAMA_DEFAULT_MODEL", default="gemma4:e2b-it-q8_0")
OLLAMA_NUM_CTX = env.int("OLLAMA_NUM_CTX", default=65536)
OLLAMA_THINK = env.bool("OLLAMA_THINK", default=True)
OLLAMA_KEEP_ALIVE = env.str("OLLAMA_KEEP_ALIVE", default="30m")
OPENAI_API_KEY = env.str("OPENAI_API_KEY", default="")
OPENAI_BASE_URL = env.str("OPENAI_BASE_URL", default="https://api.openai.com/v1")
OPENAI_MODEL = env.str("OPENAI_MODEL", default="gpt-4o-mini")
LLM_TIMEOUT_S = env.float("LLM_TIMEOUT_S", default=300.0)  # per read: how long a silent server is waited for
# Total wall-clock time of one LLM call, however steadily it streams (0 = no limit).
LLM_CALL_MAX_S = env.float("LLM_CALL_MAX_S", default=600.0)
# Output caps per purpose (max_tokens / num_predict): a small model left unbounded writes until
# the context window is full. Answers can be capped per profile (Profile.max_answer_tokens).
LLM_MAX_ANSWER_TOKENS = env.int("LLM_MAX_ANSWER_TOKENS", default=4096)
LLM_MAX_ANSWER_TOKENS_SMALL = env.int("LLM_MAX_ANSWER_TOKENS_SMALL", default=1024)  # profiles that cap their tools (small models)
# A profile that caps no tools (max_tools 0, as the default one) on a model its server says has at
# most SMALL_MODEL_MAX_PARAMS parameters (Ollama's /api/show, llama.cpp's /v1/models) runs as a small
# model's profile offered its SMALL_MODEL_MAX_TOOLS best tools (agent.turn.setup.fit_to_model); 0: never.
SMALL_MODEL_MAX_PARAMS = env.int("SMALL_MODEL_MAX_PARAMS", default=2_000_000_000)
SMALL_MODEL_MAX_TOOLS = env.int("SMALL_MODEL_MAX_TOOLS", default=8)
# Groups of small-model repairs switched off ("programs,paths"), to measure what each buys; default none
# (agent/toolcalling/guards/ledger.py; bench/agent_eval.py --guards-off).
NAVI_GUARDS_OFF = env.list("NAVI_GUARDS_OFF", default=[])
LLM_MAX_PLAN_TOKENS = env.int("LLM_MAX_PLAN_TOKENS", default=200)
LLM_MAX_SUMMARY_TOKENS = env.int("LLM_MAX_SUMMARY_TOKENS", default=1024)  # compression, memory summary, reflect
LLM_MAX_EXTRACTION_TOKENS = env.int("LLM_MAX_EXTRACTION_TOKENS", default=512)

# --- Agent, tools, sandboxing ---------------------------------------------------------------
NAVI_WORKSPACE = _path(env.str("NAVI_WORKSPACE", default="workspace"))
TOOLS_DIR = _path(env.str("TOOLS_DIR", default="user_tools"))
MANUALS_DIR = _path(env.str("MANUALS_DIR", default="manuals"))
TOOL_TIMEOUT_S = env.float("TOOL_TIMEOUT_S", default=60.0)
# A tool call waiting for the owner's approval is declined after this long.
APPROVAL_TIMEOUT_S = env.float("APPROVAL_TIMEOUT_S", default=600.0)
# Routines (routines_app): a routine's run waiting for approval is denied after this long; the
# shortest interval; routines per user; how late a missed slot may still run (older: `missed`).
ROUTINE_APPROVAL_TIMEOUT_S = env.float("ROUTINE_APPROVAL_TIMEOUT_S", default=3600.0)
ROUTINE_MIN_INTERVAL_S = env.int("ROUTINE_MIN_INTERVAL_S", default=60)
ROUTINES_MAX_PER_USER = env.int("ROUTINES_MAX_PER_USER", default=50)
# "Run now" (POST /routines/<id>/run) per user: at most this many in the window, then 429.
ROUTINE_RUN_NOW_MAX = env.int("ROUTINE_RUN_NOW_MAX", default=6)
ROUTINE_RUN_NOW_WINDOW_S = env.int("ROUTINE_RUN_NOW_WINDOW_S", default=60)
ROUTINE_CATCH_UP_S = env.int("ROUTINE_CATCH_UP_S", default=6 * 3600)
# A routine run whose worker has not heart-beaten for this long died with its process: interrupted.
ROUTINE_STALE_S = env.int("ROUTINE_STALE_S", default=60)
# MCP servers (tools_app.mcp): the handshake must finish within MCP_CONNECT_TIMEOUT_S; a tool's
# text result is cut to MCP_MAX_RESULT_CHARS for the model; one answer (HTTP body, SSE event, stdio
# line) may be MCP_MAX_RESPONSE_MB, counted while it streams; MCP_MAX_CONCURRENT_CALLS per server.
MCP_CONNECT_TIMEOUT_S = env.float("MCP_CONNECT_TIMEOUT_S", default=10.0)
MCP_MAX_RESULT_CHARS = env.int("MCP_MAX_RESULT_CHARS", default=65536)
MCP_MAX_RESPONSE_MB = env.int("MCP_MAX_RESPONSE_MB", default=8)
MCP_MAX_CONCURRENT_CALLS = env.int("MCP_MAX_CONCURRENT_CALLS", default=4)
# Each stdio MCP server's own writable, persistent folder (its HOME in the sandbox: npm/uv caches,
# its data) is MCP_DATA_DIR/<id>; a launcher (npx, uvx) may take MCP_FIRST_START_TIMEOUT_S to start.
MCP_DATA_DIR = _path(env.str("MCP_DATA_DIR", default="mcp_data"))
MCP_FIRST_START_TIMEOUT_S = env.float("MCP_FIRST_START_TIMEOUT_S", default=180.0)
# MCP tools ask until allowed (DESIGN §9); with this on, one its server marks read-only
# (annotations.readOnlyHint, a hint from the server) runs without asking.
MCP_READ_ONLY_ALLOW = env.bool("MCP_READ_ONLY_ALLOW", default=False)
# A connected MCP server is pinged this often while idle: one that died shows `failed` soon.
MCP_PING_INTERVAL_S = env.float("MCP_PING_INTERVAL_S", default=10.0)
# A stdio MCP server's memory cap (RLIMIT_DATA, and cgroup v2 memory.max where writable; not the
# address space, which V8 reserves by the gigabyte); its other caps are the SANDBOX_* ones.
MCP_STDIO_MEMORY_MB = env.int("MCP_STDIO_MEMORY_MB", default=2048)
# Unlike the original ("*"), the filesystem tool defaults to the run's own workspace (an entry
# naming NAVI_WORKSPACE means NAVI_WORKSPACE/<user id>). Extra entries and "*" only apply to
# holders of tools_app.run_host_tools; user_tools/ is never writable through the file tool.
FS_ALLOWED_PATHS = env.str("FS_ALLOWED_PATHS", default=str(NAVI_WORKSPACE))
# Read-only utilities; programs that can run other programs are refused unless this is "*".
TERMINAL_ALLOWED_COMMANDS = env.str(
    "TERMINAL_ALLOWED_COMMANDS",
    default="ls,cat,head,tail,wc,grep,sort,uniq,cut,tr,du,df,free,uptime,date,stat,file,pwd,echo,whoami,uname",
)
TERMINAL_NETWORK = env.bool("TERMINAL_NETWORK", default=False)
HTTP_ALLOWED_HOSTS = env.list("HTTP_ALLOWED_HOSTS", default=[])
CODE_EXEC_SANDBOX = env.str("CODE_EXEC_SANDBOX", default="bwrap")
CODE_EXEC_NETWORK = env.bool("CODE_EXEC_NETWORK", default=False)
SSH_HOSTS_FILE = _path(env.str("SSH_HOSTS_FILE", default="ssh_hosts.json"))
USER_TOOL_IMPORT_TIMEOUT_S = env.float("USER_TOOL_IMPORT_TIMEOUT_S", default=10.0)
TOOL_OUTPUT_MAX_BYTES = env.int("TOOL_OUTPUT_MAX_BYTES", default=100_000)
FS_READ_MAX_BYTES = env.int("FS_READ_MAX_BYTES", default=200_000)
# Before a filesystem call writes over, deletes or moves onto a file, its old content is kept
# (tools_app.file_versions): files up to this size, the newest FILE_VERSIONS_KEPT per user.
FILE_VERSION_MAX_BYTES = env.int("FILE_VERSION_MAX_BYTES", default=10_000_000)
FILE_VERSIONS_KEPT = env.int("FILE_VERSIONS_KEPT", default=200)
CODE_EXEC_MEMORY_MB = env.int("CODE_EXEC_MEMORY_MB", default=512)
CODE_EXEC_MAX_PROCS = env.int("CODE_EXEC_MAX_PROCS", default=64)
CODE_EXEC_MAX_FILE_MB = env.int("CODE_EXEC_MAX_FILE_MB", default=64)
# terminal and user tools: address space and file size (prlimit), processes (a pids cgroup, as root)
SANDBOX_MEMORY_MB = env.int("SANDBOX_MEMORY_MB", default=1024)
SANDBOX_MAX_FILE_MB = env.int("SANDBOX_MAX_FILE_MB", default=64)
SANDBOX_MAX_PROCS = env.int("SANDBOX_MAX_PROCS", default=64)
CODE_EXEC_PYTHON = env.str("CODE_EXEC_PYTHON", default="")  # empty: /usr/bin/python3 (stdlib only)
# Running as root, sandboxed programs run as this unprivileged host user (never uid 0) and own
# the workspaces they write; a dedicated account keeps them apart from other `nobody` services.
SANDBOX_UID = env.int("SANDBOX_UID", default=65534)
SANDBOX_GID = env.int("SANDBOX_GID", default=65534)


# --- Session files ------------------------------------------------------------------------
SESSION_FILES_DIR = _path(env.str("SESSION_FILES_DIR", default="session_files"))
SESSION_FILES_MAX_SIZE_MB = env.int("SESSION_FILES_MAX_SIZE_MB", default=200)
SESSION_FILES_TTL_HOURS = env.int("SESSION_FILES_TTL_HOURS", default=24)
# Request bodies are capped before they are read (sessions_app/bodylimit.py): per path for
# signed-in requests (uploads, SESSION_IMPORT_MAX_MB, DATA_UPLOAD_MAX_MEMORY_SIZE elsewhere),
# and this much for requests without credentials (a login form is a few hundred bytes).
ANONYMOUS_BODY_MAX_KB = env.int("ANONYMOUS_BODY_MAX_KB", default=64)

# --- Knowledge (the owner's documents, and memory, found by meaning) ----------------------
# Embeddings come from the Ollama server at OLLAMA_HOST (`POST /api/embed`), or from an
# OpenAI-compatible server when EMBEDDING_BASE_URL is set (`…/v1/embeddings`). Changing the
# model re-embeds everything in the background; until then search uses the words.
EMBEDDING_MODEL = env.str("EMBEDDING_MODEL", default="nomic-embed-text")
EMBEDDING_BASE_URL = env.str("EMBEDDING_BASE_URL", default="")
EMBEDDING_API_KEY = env.str("EMBEDDING_API_KEY", default="")
EMBEDDING_BATCH = env.int("EMBEDDING_BATCH", default=32)  # passages per embedding request
EMBEDDING_TIMEOUT_S = env.float("EMBEDDING_TIMEOUT_S", default=60.0)
# An optional reranker (a cross-encoder behind `/v1/rerank`: llama.cpp's `llama-server --reranking`,
# vLLM, or Hugging Face TEI's `/rerank`) re-orders search's best RERANK_CANDIDATES passages. Unset:
# none. When it fails or is slow, search keeps its own order and the status says why.
RERANK_BASE_URL = env.str("RERANK_BASE_URL", default="")
RERANK_MODEL = env.str("RERANK_MODEL", default="")
RERANK_API_KEY = env.str("RERANK_API_KEY", default="")
RERANK_CANDIDATES = env.int("RERANK_CANDIDATES", default=20)  # passages sent per query: its latency grows with them
RERANK_TIMEOUT_S = env.float("RERANK_TIMEOUT_S", default=10.0)
KNOWLEDGE_DIR = _path(env.str("KNOWLEDGE_DIR", default="knowledge_files"))  # the uploads (a document's download)
KNOWLEDGE_MAX_FILE_MB = env.int("KNOWLEDGE_MAX_FILE_MB", default=200)
KNOWLEDGE_MAX_PASSAGES = env.int("KNOWLEDGE_MAX_PASSAGES", default=50_000)  # per document
KNOWLEDGE_MAX_DOCUMENTS = env.int("KNOWLEDGE_MAX_DOCUMENTS", default=1000)  # per user
KNOWLEDGE_EMBED_FACTS = env.bool("KNOWLEDGE_EMBED_FACTS", default=True)  # memory facts get vectors when saved (memory by meaning)
# An upload is parsed in a child process of the job worker with these limits (address space,
# CPU seconds, wall-clock seconds); past one the document is `failed` with the limit's name.
KNOWLEDGE_PARSE_MEMORY_MB = env.int("KNOWLEDGE_PARSE_MEMORY_MB", default=1024)
KNOWLEDGE_PARSE_CPU_S = env.int("KNOWLEDGE_PARSE_CPU_S", default=300)
KNOWLEDGE_PARSE_TIMEOUT_S = env.float("KNOWLEDGE_PARSE_TIMEOUT_S", default=600.0)
KNOWLEDGE_DOCX_XML_MAX_MB = env.int("KNOWLEDGE_DOCX_XML_MAX_MB", default=256)  # a DOCX's text inflated past this: a zip bomb

# --- Background jobs (jobs_app: Django's Tasks API, django-tasks-db's database queue) -------------
# Work that is not a request (indexing, embedding, memory extraction, file cleanup) is a task;
# `manage.py db_worker` processes run them (`make run` starts one beside the web server). With
# PostgreSQL, workers on other machines may take jobs from the same queue.
TASKS = {"default": {"BACKEND": "django_tasks_db.DatabaseBackend", "QUEUES": []}}  # any queue name
NAVI_JOB_WORKERS = env.int("NAVI_JOB_WORKERS", default=1)  # db_worker processes `navi_project.serve` starts beside it
JOBS_WORKER_LANES = env.int("JOBS_WORKER_LANES", default=2)  # jobs one worker process runs at once
JOBS_POLL_S = env.float("JOBS_POLL_S", default=0.5)  # an idle lane looks for a job this often
JOBS_HEARTBEAT_S = env.float("JOBS_HEARTBEAT_S", default=1.0)
JOBS_WORKER_STALE_S = env.float("JOBS_WORKER_STALE_S", default=15.0)  # a worker silent this long is dead
JOBS_MAX_ATTEMPTS = env.int("JOBS_MAX_ATTEMPTS", default=3)  # a job whose worker died this often: failed
JOBS_SLICE_S = env.float("JOBS_SLICE_S", default=2.0)  # a long job yields the lane to others this often
JOBS_STOP_TIMEOUT_S = env.float("JOBS_STOP_TIMEOUT_S", default=10.0)  # Ctrl-C waits this long for running slices
JOBS_KEEP_RESULTS_DAYS = env.int("JOBS_KEEP_RESULTS_DAYS", default=7)  # finished jobs' rows kept (totals are kept)

# --- Chats --------------------------------------------------------------------------------
SESSION_IMPORT_MAX_MB = env.int("SESSION_IMPORT_MAX_MB", default=25)  # below DATA_UPLOAD_MAX_MEMORY_SIZE
# "model": a short title from one cheap LLM call after the first answer; "first_words": the
# first line of the first message only (no extra LLM call).
CHAT_TITLES = env.str("CHAT_TITLES", default="model")

# --- Context compression ------------------------------------------------------------------
CONTEXT_COMPRESSION_ENABLED = env.bool("CONTEXT_COMPRESSION_ENABLED", default=True)
CONTEXT_COMPRESSION_THRESHOLD = env.float("CONTEXT_COMPRESSION_THRESHOLD", default=0.80)
CONTEXT_KEEP_RECENT = env.int("CONTEXT_KEEP_RECENT", default=10)
CONTEXT_SUMMARY_TEMPERATURE = env.float("CONTEXT_SUMMARY_TEMPERATURE", default=0.3)

# --- Memory -------------------------------------------------------------------------------
# Background extraction waits until the owner has had no turn for this long (a single-slot model
# server must not be busy with extraction when the owner's next message comes).
MEMORY_EXTRACTION_IDLE_S = env.float("MEMORY_EXTRACTION_IDLE_S", default=10.0)

# --- Notifications (notify_app: Web Push and Apprise targets) ---------------------------------
def _vapid_private_key() -> str:
    """VAPID_PRIVATE_KEY, VAPID_PRIVATE_KEY_FILE, or a P-256 key generated once and kept in
    `.navi_vapid_key`: a browser's push subscription is bound to the key it was made with."""
    if env.str("VAPID_PRIVATE_KEY", default=""):
        return env.str("VAPID_PRIVATE_KEY")
    key_file = env.str("VAPID_PRIVATE_KEY_FILE", default="")
    if key_file:
        return _path(key_file).read_text().strip()
    generated = BASE_DIR / ".navi_vapid_key"
    if not generated.exists():
        import base64

        from cryptography.hazmat.primitives.asymmetric import ec

        number = ec.generate_private_key(ec.SECP256R1()).private_numbers().private_value
        _create_private_file(generated, base64.urlsafe_b64encode(number.to_bytes(32, "big")).decode().rstrip("="))
    _owner_only(generated)
    return generated.read_text().strip()


VAPID_PRIVATE_KEY = _vapid_private_key()
# The contact push services see in the VAPID claim (mailto: or https: URL).
VAPID_SUBJECT = env.str("VAPID_SUBJECT", default="mailto:navi@localhost")
NOTIFY_TIMEOUT_S = env.float("NOTIFY_TIMEOUT_S", default=10.0)  # per target and delivery
# Push endpoints must be https; plain http only when this is on (a local push service in tests).
NOTIFY_ALLOW_HTTP_PUSH = env.bool("NOTIFY_ALLOW_HTTP_PUSH", default=False)
# Navi's address as the owner's devices reach it (https://navi.example.com): Apprise messages end
# with a link to the chat when it is set (a push notification opens the page it came from).
NAVI_PUBLIC_URL = env.str("NAVI_PUBLIC_URL", default="")

# --- Metrics (GET /metrics, navi_project.metrics) --------------------------------------------
# Staff users may always read it; a Prometheus scraper sends `Authorization: Bearer <METRICS_TOKEN>`.
METRICS_TOKEN = env.str("METRICS_TOKEN", default="")

# --- Telegram (messaging_app.telegram) -----------------------------------------------------
# Unset token = no Telegram channel. Requests go to {TELEGRAM_API_URL}/bot<token>/<method>.
TELEGRAM_BOT_TOKEN = env.str("TELEGRAM_BOT_TOKEN", default="")
TELEGRAM_API_URL = env.str("TELEGRAM_API_URL", default="https://api.telegram.org").rstrip("/")
TELEGRAM_MODE = env.str("TELEGRAM_MODE", default="polling").lower()  # polling | webhook
TELEGRAM_WEBHOOK_URL = env.str("TELEGRAM_WEBHOOK_URL", default="")  # public https://…/telegram/webhook
TELEGRAM_WEBHOOK_SECRET = env.str("TELEGRAM_WEBHOOK_SECRET", default="")  # empty: derived from SECRET_KEY
TELEGRAM_POLL_TIMEOUT_S = env.int("TELEGRAM_POLL_TIMEOUT_S", default=25)  # getUpdates long poll
TELEGRAM_LEASE_S = env.float("TELEGRAM_LEASE_S", default=60.0)  # a dead poller's lease is taken over after this
# The official Bot API serves files up to 20 MB (getFile); a local Bot API server can go higher.
TELEGRAM_FILE_MAX_MB = env.int("TELEGRAM_FILE_MAX_MB", default=20)

# --- Voice (voice_app: speech servers with the OpenAI audio API) ---------------------------
# Speech-to-text: POST {STT_BASE_URL}/v1/audio/transcriptions (faster-whisper servers such as
# Speaches, LocalAI, OpenAI); text-to-speech: POST {TTS_BASE_URL}/v1/audio/speech (Kokoro-FastAPI,
# openedai-speech, LocalAI, OpenAI). Unset URL = that half of voice is off. These are the first
# values: the owner changes them in Settings → Voice (stored in the database, no restart).
STT_BASE_URL = env.str("STT_BASE_URL", default="").rstrip("/")
STT_MODEL = env.str("STT_MODEL", default="whisper-1")
STT_API_KEY = env.str("STT_API_KEY", default="")
TTS_BASE_URL = env.str("TTS_BASE_URL", default="").rstrip("/")
TTS_MODEL = env.str("TTS_MODEL", default="tts-1")
TTS_VOICE = env.str("TTS_VOICE", default="alloy")
TTS_API_KEY = env.str("TTS_API_KEY", default="")
# The format the page asks the TTS server for (mp3 plays everywhere; opus, aac, flac, wav, pcm).
TTS_FORMAT = env.str("TTS_FORMAT", default="mp3")
VOICE_MAX_SECONDS = env.int("VOICE_MAX_SECONDS", default=300)  # longest recording transcribed
VOICE_MAX_MB = env.int("VOICE_MAX_MB", default=25)  # largest audio upload (413 before it is read)
VOICE_TIMEOUT_S = env.float("VOICE_TIMEOUT_S", default=120.0)  # one transcription or speech request

# --- Persona ------------------------------------------------------------------------------
NAVI_PERSONA = env.str("NAVI_PERSONA", default="")
NAVI_PERSONA_FILE = env.str("NAVI_PERSONA_FILE", default="persona.txt")
if not NAVI_PERSONA and NAVI_PERSONA_FILE and _path(NAVI_PERSONA_FILE).is_file():
    NAVI_PERSONA = _path(NAVI_PERSONA_FILE).read_text(encoding="utf-8").strip()

# --- Profiles -------------------------------------------------------------------------------
# The model sessions point to (like AUTH_USER_MODEL): sessions_app refers to profiles through
# this name, so it does not import the agent app that defines them.
NAVI_PROFILE_MODEL = "agent.Profile"
# The profile of a new chat, a spawned sub-agent or an import when nothing else is chosen.
NAVI_DEFAULT_PROFILE = "secretary"

# --- Owner account (created by `make run` when no user exists) ------------------------------
NAVI_ADMIN_USER = env.str("NAVI_ADMIN_USER", default="navi")
NAVI_ADMIN_PASSWORD = env.str("NAVI_ADMIN_PASSWORD", default="")

# --- Test overrides -------------------------------------------------------------------------
if TESTING:
    PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # fast logins in tests
    # A title call after each first answer would take a scripted turn from the test LLM; the
    # title tests turn it on.
    CHAT_TITLES = env.str("CHAT_TITLES", default="first_words")
