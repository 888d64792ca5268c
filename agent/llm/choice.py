"""Which model a turn asks — the one rule every path follows (chat page, REST, routines,
Telegram, sub-agents, titles, memory extraction; DESIGN §11): the chat's pick → the profile's
model → the owner's default (`default_model`) → when that is not on the server, its first
installed chat model, said in the answer's meta (`model_note`) and by `GET /models`."""

from __future__ import annotations

import time
from dataclasses import dataclass

from agent.llm.base import LLMBackend, LLMError
from agent.models import Profile
from navi_project import connections

LISTING_TTL_S = 10.0
_listings: dict[tuple[str, str], tuple[float, list[dict]]] = {}


def same_model(a: str, b: str) -> bool:
    """Ollama's `name` and `name:latest` are one model."""
    return a.removesuffix(":latest") == b.removesuffix(":latest")


@dataclass
class ModelChoice:
    model: str
    backend: str
    wanted: str = ""  # the owner's default that is not on the server, when `model` stands in for it

    @property
    def note(self) -> str:
        if not self.wanted:
            return ""
        return (f"The default model “{self.wanted}” is not on the server, so Navi used “{self.model}”. "
                "Choose the default model in Settings → Connections, or pull it.")


async def server_models(backend: LLMBackend, *, fresh: bool = False) -> list[dict]:
    """What the backend's server has (`{"name", "size"?, "embedding"?}`), kept LISTING_TTL_S."""
    key = (backend.name, backend.server_key())
    hit = _listings.get(key)
    if hit is not None and not fresh and time.monotonic() - hit[0] < LISTING_TTL_S:
        return hit[1]
    found = await backend.describe_models()
    _listings[key] = (time.monotonic(), found)
    return found


def forget_listings() -> None:
    """A pull or a changed connection: the next turn asks the server again."""
    _listings.clear()


def chat_models(listing: list[dict]) -> list[dict]:
    """The models of a listing that can answer a chat (not the embedding-only ones)."""
    return [m for m in listing if not m.get("embedding")]


async def stand_in(backend: LLMBackend, wanted: str) -> str:
    """The model used for a default `wanted` that is not on the server: its first chat model by
    name; "" when the default is there, the server has no chat model, or it cannot be asked."""
    try:
        listing = await server_models(backend)
    except LLMError:
        return ""  # the call itself will say what is wrong with the server
    if any(same_model(m["name"], wanted) for m in listing):
        return ""
    chatty = sorted(chat_models(listing), key=lambda m: m["name"])
    return chatty[0]["name"] if chatty else ""


async def choose_model(backends, profile: Profile, chat_model: str = "") -> ModelChoice:
    """Settle the turn's model on `profile` (the turn's own copy: its `model` and `llm_backend`
    are set to what every call of the turn asks) and say which it is."""
    await connections.refresh()
    backend_name = profile.effective_backend()  # by the profile's own model: a chat's pick is on that server too
    profile.llm_backend = backend_name
    own = chat_model or profile.model
    if own:
        profile.model = own
        return ModelChoice(own, backend_name)
    wanted = connections.default_model(backend_name)
    instead = await stand_in(backends.get(backend_name), wanted)
    profile.model = instead or wanted
    return ModelChoice(profile.model, backend_name, wanted if instead else "")
