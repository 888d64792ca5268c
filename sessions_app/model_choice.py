"""Which model a chat may pick: the agent registers how to ask a profile's server what it has
(sessions_app sits below the LLM backends and cannot ask them itself)."""

from __future__ import annotations

from typing import Any, Callable

from navi_project.http import ApiError

# profile -> the models its server has now (`{"name", "embedding"?}`); raises ApiError when it cannot say.
_lister: Callable[[Any], list[dict]] | None = None


def register_model_lister(lister: Callable[[Any], list[dict]]) -> None:
    global _lister
    _lister = lister


def same_model(a: str, b: str) -> bool:
    """Ollama's `name` and `name:latest` are one model."""
    return a.removesuffix(":latest") == b.removesuffix(":latest")


def checked_model(profile: Any, name: object) -> str:
    """`name` if the profile's server has it and it can chat ("" = the profile's own model), else a 400."""
    if not isinstance(name, str) or len(name) > 200:
        raise ApiError('model must be a model name string of at most 200 characters ("" = the profile\'s)', 400)
    name = name.strip()
    if not name:
        return ""
    if _lister is None:
        raise ApiError("this server cannot list its models; set the model in the profile instead", 400)
    listing = _lister(profile)
    for known in listing:
        if same_model(known["name"], name):
            if known.get("embedding"):
                raise ApiError(f"'{known['name']}' is an embedding model: it turns text into vectors for search "
                               "and cannot answer a chat; pick a chat model", 400)
            return known["name"]
    have = [m["name"] for m in listing if not m.get("embedding")]
    listed = ", ".join(have) if have else "none"
    backend = profile.effective_backend() if hasattr(profile, "effective_backend") else profile.llm_backend
    raise ApiError(
        f"the {backend} server of profile '{profile.pk}' has no model '{name}' (it has: {listed}); "
        "pick one of those, or pull it first",
        400,
    )
