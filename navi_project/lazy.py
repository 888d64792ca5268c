"""Heavy libraries that only some paths use, imported on first use, not at server start.

asyncssh (with its crypto) took ~130 ms of the server's boot for the one tool that connects
over SSH; the official `ollama` client (pydantic models) ~250 ms, though the lean reader
(agent.llm.ndjson) serves chats without it. `lazy_module(name)` is a stand-in that imports the
real module the first time one of its attributes is read and forwards every attribute to it,
so code keeps writing `asyncssh.connect(...)` and a test that patches the real module (or the
stand-in) is seen. The import itself is Python's own: thread-safe, done once. The MCP SDK
(~600 ms of pydantic models), pywebpush with aiohttp, apprise, python-telegram-bot and PIL are
kept out of the boot the same way (tests/test_boot_imports.py).
"""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType


class _LazyModule(ModuleType):
    def _module(self) -> ModuleType:
        return importlib.import_module(self.__name__)

    def __getattr__(self, attr: str):  # only for names not in the stand-in itself
        return getattr(self._module(), attr)

    def __setattr__(self, attr: str, value) -> None:
        setattr(self._module(), attr, value)

    def __delattr__(self, attr: str) -> None:
        delattr(self._module(), attr)


def lazy_module(name: str) -> ModuleType:
    """A stand-in for module `name` that imports it when first used."""
    # Only the top package is looked for: finding "PIL.Image" would import PIL (and "mcp.server…" all of mcp).
    if importlib.util.find_spec(name.partition(".")[0]) is None:
        raise ModuleNotFoundError(f"No module named {name!r}; install the requirements (make install)", name=name)
    return _LazyModule(name)
