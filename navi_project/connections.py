"""The owner's connections and default models as every process sees them now: the Ollama URL,
OpenAI-compatible servers, the default chat model and the embedding model (DESIGN §11 "The
owner's settings"). sessions_app stores them and registers the reader (this module sits below
every app); `.env` gives the values the owner has not set. Re-read at most every TTL_S, so a
change in Settings reaches every worker within seconds, without a restart or a query per call."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import Callable

from asgiref.sync import sync_to_async
from django.conf import settings

log = logging.getLogger(__name__)
TTL_S = 2.0


@dataclass(frozen=True)
class Server:
    """An OpenAI-compatible server: `name` is the profiles' `llm_backend` that reaches it."""

    name: str
    base_url: str
    api_key: str = ""


@dataclass(frozen=True)
class Stored:
    """What the owner set; "" (or None for the servers) = `.env`'s value."""

    ollama_url: str = ""
    default_model: str = ""
    default_backend: str = ""
    embedding_model: str = ""
    servers: tuple[Server, ...] | None = None
    extra: dict = field(default_factory=dict)


_source: Callable[[], Stored] | None = None
_cache: tuple[float, Stored] = (0.0, Stored())


def register_source(source: Callable[[], Stored]) -> None:
    global _source
    _source = source


def forget() -> None:
    """This process changed them: read again at the next use."""
    global _cache
    _cache = (0.0, _cache[1])


def reset() -> None:
    """Forget the values read (tests: each starts from `.env`'s)."""
    global _cache
    _cache = (0.0, Stored())


def _stale() -> bool:
    return _source is not None and time.monotonic() - _cache[0] > TTL_S


def _read() -> Stored:
    from django.db import connections

    try:
        return _source()
    finally:
        connections.close_all()


def _store(stored: Stored) -> None:
    global _cache
    _cache = (time.monotonic(), stored)


async def refresh() -> None:
    """Read them again when stale (one thread hop every TTL_S at most): a turn calls this first."""
    if _stale():
        try:
            _store(await sync_to_async(_read, thread_sensitive=False)())
        except Exception as exc:  # noqa: BLE001 - the database is away: keep what we had
            log.warning("connections: could not read the owner's settings: %s", exc)
            _store(_cache[1])


def stored() -> Stored:
    """The owner's values; read from the database in sync code when stale (on the event loop the
    cached ones are used: `refresh` there)."""
    if _stale():
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            try:
                _store(_source())
            except Exception as exc:  # noqa: BLE001
                log.warning("connections: could not read the owner's settings: %s", exc)
                _store(_cache[1])
    return _cache[1]


def ollama_url() -> str:
    return (stored().ollama_url or settings.OLLAMA_HOST).rstrip("/")


def embedding_model() -> str:
    return stored().embedding_model or settings.EMBEDDING_MODEL


def env_server() -> Server | None:
    """The OpenAI-compatible server `.env` names (backend "openai"), if it names one."""
    if settings.OPENAI_API_KEY or settings.OPENAI_BASE_URL.rstrip("/") != "https://api.openai.com/v1":
        return Server("openai", settings.OPENAI_BASE_URL.rstrip("/"), settings.OPENAI_API_KEY)
    return None


def servers() -> tuple[Server, ...]:
    """The OpenAI-compatible servers: the owner's list, else the one `.env` names."""
    own = stored().servers
    if own is not None:
        return own
    env = env_server()
    return (env,) if env else ()


def server(name: str) -> Server | None:
    return next((s for s in servers() if s.name == name), None)


def default_model(backend: str = "ollama") -> str:
    """The owner's default chat model for a profile on `backend` that names none itself: the one
    chosen in Settings on its server, else `.env`'s (OLLAMA_DEFAULT_MODEL, OPENAI_MODEL)."""
    own = stored()
    if own.default_model and (own.default_backend or "ollama") == (backend or "ollama"):
        return own.default_model
    return settings.OLLAMA_DEFAULT_MODEL if (backend or "ollama") == "ollama" else settings.OPENAI_MODEL


def backend_for(profile_backend: str, profile_model: str) -> str:
    """The server a profile's turn asks: a profile on the default server ("ollama") that names no
    model of its own follows the owner's default, server and all."""
    if not profile_model and (profile_backend or "ollama") == "ollama":
        return default_choice()[0]
    return profile_backend or "ollama"


def default_choice() -> tuple[str, str]:
    """(backend, model) of the owner's default."""
    own = stored()
    if own.default_model:
        return own.default_backend or "ollama", own.default_model
    return "ollama", settings.OLLAMA_DEFAULT_MODEL
