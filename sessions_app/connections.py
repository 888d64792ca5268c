"""The owner's connections and default models (DESIGN §11 "The owner's settings"): stored in
`ServerSettings`, shown in `GET /settings`, changed by staff with `PATCH /settings`, read by every
process through navi_project.connections. A server's key is write-only: stored encrypted with a
key derived from SECRET_KEY, shown back only as `has_key`."""

from __future__ import annotations

import base64
import hashlib
import logging
import re
import urllib.parse

from cryptography.fernet import Fernet, InvalidToken
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from navi_project import connections
from navi_project.http import ApiError

from .models import ServerSettings
from .signals import embedding_model_changed

log = logging.getLogger(__name__)
KEYS = {"default_model", "default_backend", "embedding_model", "connections"}
MAX_SERVERS = 10
_SERVER_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,31}$")
_MODEL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._\-/:@]{0,199}$")


def _fernet() -> Fernet:
    digest = hashlib.sha256(f"navi.connections:{settings.SECRET_KEY}".encode()).digest()
    return Fernet(base64.urlsafe_b64encode(digest))


def seal(key: str) -> str:
    return _fernet().encrypt(key.encode()).decode() if key else ""


def unseal(token: str) -> str:
    """The key, or "" when SECRET_KEY changed since it was stored (the owner enters it again)."""
    if not token:
        return ""
    try:
        return _fernet().decrypt(token.encode()).decode()
    except (InvalidToken, ValueError):
        return ""


def _row() -> ServerSettings:
    return ServerSettings.objects.get_or_create(pk=1)[0]


def read_stored() -> connections.Stored:
    """navi_project.connections' source (registered in SessionsAppConfig.ready)."""
    row = ServerSettings.objects.filter(pk=1).first()
    if row is None:
        return connections.Stored()
    servers = None
    if row.openai_servers is not None:
        servers = tuple(connections.Server(s["name"], s["base_url"], unseal(s.get("key", "")))
                        for s in row.openai_servers if isinstance(s, dict) and s.get("name") and s.get("base_url"))
    return connections.Stored(row.ollama_url, row.default_model, row.default_backend, row.embedding_model, servers)


def describe(user) -> dict:
    """`default_model`, `default_backend`, `embedding_model` and `connections` of GET /settings."""
    connections.forget()
    backend, model = connections.default_choice()
    return {
        "default_model": model,
        "default_backend": backend,
        "embedding_model": connections.embedding_model(),
        "connections": {
            "ollama_url": connections.ollama_url(),
            "openai": [{"name": s.name, "base_url": s.base_url, "has_key": bool(s.api_key)} for s in connections.servers()],
            "can_change": bool(user.is_staff),
        },
    }


def _url(value: object, what: str) -> str:
    if not isinstance(value, str) or len(value) > 500:
        raise ApiError(f"{what} must be a URL such as http://localhost:11434 (at most 500 characters)", 400)
    value = value.strip().rstrip("/")
    if not value:
        return ""
    parts = urllib.parse.urlsplit(value if "://" in value else f"http://{value}")
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ApiError(f"{what} {value!r} is not an http(s) URL; give one such as http://192.168.1.20:11434", 400)
    return urllib.parse.urlunsplit(parts)


def _model(value: object, what: str) -> str:
    if not isinstance(value, str) or (value.strip() and not _MODEL.match(value.strip())):
        raise ApiError(f'{what} must be a model name such as "qwen2.5:3b" ("" = the one .env names)', 400)
    return value.strip()


def _servers(value: object, before: list[dict]) -> list[dict]:
    """The new list of OpenAI-compatible servers; an entry without `key` keeps the stored one."""
    if not isinstance(value, list) or len(value) > MAX_SERVERS:
        raise ApiError(f"connections.openai must be a list of at most {MAX_SERVERS} servers "
                       '{"name", "base_url", "key"?}', 400)
    old = {s.get("name"): s for s in before}
    out, seen = [], set()
    for entry in value:
        if not isinstance(entry, dict) or set(entry) - {"name", "base_url", "key", "has_key"}:
            raise ApiError('each OpenAI-compatible server is {"name", "base_url", "key"?}', 400)
        name = entry.get("name")
        if not isinstance(name, str) or not _SERVER_NAME.match(name.strip()) or name.strip() == "ollama":
            raise ApiError(f"server name {name!r} must be 1-32 lower-case letters, digits, - or _ (not \"ollama\"): "
                           "profiles name it in their llm_backend", 400)
        name = name.strip()
        if name in seen:
            raise ApiError(f"two servers are named {name!r}; give each its own name", 400)
        seen.add(name)
        base_url = _url(entry.get("base_url", ""), f"the base_url of {name}")
        if not base_url:
            raise ApiError(f"server {name!r} needs a base_url such as http://localhost:8080/v1", 400)
        if "key" in entry:
            if not isinstance(entry["key"], str) or len(entry["key"]) > 500:
                raise ApiError(f"the key of {name!r} must be text of at most 500 characters", 400)
            key = seal(entry["key"].strip())
        else:
            key = old.get(name, {}).get("key", "")
            if not key and name == "openai" and (env := connections.env_server()) is not None:
                key = seal(env.api_key)  # the key .env gave keeps working when the list is first saved
        out.append({"name": name, "base_url": base_url, "key": key})
    return out


def _embedding_changed() -> None:
    connections.forget()  # the receivers read the new model
    for receiver, result in embedding_model_changed.send_robust(sender=ServerSettings):
        if isinstance(result, Exception):
            log.error("embedding_model_changed receiver %r failed", receiver, exc_info=result)


def change(user, data: dict) -> None:
    """Apply the owner's part of a PATCH /settings body (staff only)."""
    wanted = set(data) & KEYS
    if not wanted:
        return
    if not user.is_staff:
        raise ApiError("only the owner (a staff account) changes the connections and default models", 403)
    with transaction.atomic():
        row = ServerSettings.objects.select_for_update().filter(pk=1).first() or _row()
        embedding_before = row.embedding_model or settings.EMBEDDING_MODEL
        if "default_model" in data:
            row.default_model = _model(data["default_model"], "default_model")
            row.default_backend = "ollama" if "default_backend" not in data else row.default_backend
        if "default_backend" in data:  # the server default_model was chosen from ("ollama" or a server's name)
            backend = data["default_backend"]
            if not isinstance(backend, str) or len(backend) > 64:
                raise ApiError('default_backend must be "ollama" or an OpenAI-compatible server\'s name', 400)
            row.default_backend = backend.strip() or "ollama"
        if "embedding_model" in data:
            row.embedding_model = _model(data["embedding_model"], "embedding_model")
        if "connections" in data:
            conn = data["connections"]
            if not isinstance(conn, dict) or set(conn) - {"ollama_url", "openai"}:
                raise ApiError('connections must be {"ollama_url"?, "openai"?: [{"name", "base_url", "key"?}]}', 400)
            if "ollama_url" in conn:
                row.ollama_url = _url(conn["ollama_url"], "connections.ollama_url")
            if "openai" in conn:
                row.openai_servers = _servers(conn["openai"], row.openai_servers or [])
        backends = {"ollama", *(s["name"] for s in (row.openai_servers or []))}
        if row.openai_servers is None and connections.env_server():
            backends.add("openai")
        if row.default_model and (row.default_backend or "ollama") not in backends:
            raise ApiError(f"default_model's server {row.default_backend!r} is not one of the connections "
                           f"({', '.join(sorted(backends))})", 400)
        row.updated_at = timezone.now()
        row.save()
        if (row.embedding_model or settings.EMBEDDING_MODEL) != embedding_before:
            transaction.on_commit(_embedding_changed)
    connections.forget()
