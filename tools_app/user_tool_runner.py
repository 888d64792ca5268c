"""Child-process side of user tools. Run as `python -I user_tool_runner.py meta|run <file>`,
inside the bubblewrap sandbox (tools_app.loader.child_command); never imported by the server. Prints one JSON object on the original stdout; anything the
user's code prints goes to stderr so it cannot corrupt the answer. Stdlib only (no Django)."""

from __future__ import annotations

import asyncio
import importlib.util
import inspect
import json
import os
import sys
import traceback

REQUIRED = ("name", "description", "parameters", "execute")
OUTPUT_CAP = 200_000


def _answer(fd: int, payload: dict) -> None:
    data = json.dumps(payload, default=str).encode()
    with os.fdopen(fd, "wb") as out:
        out.write(data)


def _import(path: str):
    stem = os.path.splitext(os.path.basename(path))[0]
    spec = importlib.util.spec_from_file_location(f"navi_user_tool_{stem}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _class_tools(module) -> list:
    """Class format: classes defined in the file with a name and an async execute."""
    found = []
    for _, cls in inspect.getmembers(module, inspect.isclass):
        if cls.__module__ != module.__name__:
            continue
        if isinstance(getattr(cls, "name", None), str) and cls.name and callable(getattr(cls, "execute", None)):
            found.append(cls)
    return found


def describe(module) -> dict:
    """Metadata of the file's tools, or the exact list of what is missing."""
    if any(hasattr(module, attr) for attr in REQUIRED):
        missing = [attr for attr in REQUIRED if not hasattr(module, attr)]
        if missing:
            return {"ok": False, "error": "missing required module-level definitions: " + ", ".join(missing)}
        problems = _check_module_format(module)
        if problems:
            return {"ok": False, "error": "; ".join(problems)}
        meta = {"name": module.name, "description": module.description, "parameters": module.parameters}
        return {"ok": True, "format": "module", "tools": [dict(meta, cls="", network=_wants_network(module))]}
    classes = _class_tools(module)
    if not classes:
        return {"ok": False, "error": "missing required module-level definitions: " + ", ".join(REQUIRED)}
    tools = []
    for cls in classes:
        if not inspect.iscoroutinefunction(cls.execute):
            return {"ok": False, "error": f"class {cls.__name__}: execute must be `async def`"}
        params = getattr(cls, "parameters", None) or {"type": "object", "properties": {}}
        tools.append({
            "name": cls.name, "description": getattr(cls, "description", ""), "parameters": params,
            "cls": cls.__name__, "network": _wants_network(cls),
        })
    return {"ok": True, "format": "class", "tools": tools}


def _wants_network(owner) -> bool:
    """`network = True` at module (or class) level: the tool's calls may use the network."""
    return getattr(owner, "network", False) is True


def _check_module_format(module) -> list[str]:
    problems = []
    if not isinstance(module.name, str) or not module.name:
        problems.append("`name` must be a non-empty string")
    if not isinstance(module.description, str):
        problems.append("`description` must be a string")
    if not isinstance(module.parameters, dict) or module.parameters.get("type") != "object":
        problems.append('`parameters` must be a JSON-schema dict with "type": "object"')
    if not inspect.iscoroutinefunction(module.execute):
        problems.append("`execute` must be defined with `async def execute(params: dict) -> str`")
    return problems


async def _run(module, cls_name: str, params: dict) -> dict:
    if cls_name:
        result = await getattr(module, cls_name)().execute(params)
    else:
        result = await module.execute(params)
    if hasattr(result, "success") and hasattr(result, "output"):  # a ToolResult (class format)
        payload = {
            "success": bool(result.success),
            "output": str(result.output or ""),
            "error": result.error,
            "metadata": getattr(result, "metadata", {}) or {},
        }
    else:
        if result is not None and not isinstance(result, str):
            result = str(result)
        payload = {"success": True, "output": result if result is not None else "", "error": None, "metadata": {}}
    if len(payload["output"]) > OUTPUT_CAP:
        payload["output"] = payload["output"][:OUTPUT_CAP] + f"\n[truncated: output exceeded {OUTPUT_CAP} characters]"
    return dict(payload, ok=True)


def _user_traceback(exc: BaseException, path: str) -> str:
    """The traceback from the user's file on (the runner's own frames are noise)."""
    frames = traceback.extract_tb(exc.__traceback__)
    first = next((i for i, f in enumerate(frames) if os.path.abspath(f.filename) == os.path.abspath(path)), None)
    lines = []
    if first is not None:
        lines = ["Traceback (most recent call last):\n", *traceback.StackSummary.from_list(frames[first:]).format()]
    lines += traceback.TracebackException.from_exception(exc).format_exception_only()
    return "".join(lines)


def main() -> None:
    answer_fd = os.dup(1)
    os.dup2(2, 1)  # prints of the user's code (even from C) go to stderr
    sys.stdout = sys.stderr
    mode, path = sys.argv[1], sys.argv[2]
    cls_name = sys.argv[3] if len(sys.argv) > 3 else ""
    sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tools_app.base
    # The server's site-packages (-I leaves them out: the interpreter runs outside its venv).
    sys.path.extend(p for p in os.environ.get("NAVI_SITE_PACKAGES", "").split(":") if p)
    try:
        params = json.loads(sys.stdin.read() or "{}") if mode == "run" else {}
        module = _import(path)
        if mode == "meta":
            payload = describe(module)
        else:
            payload = asyncio.run(_run(module, cls_name, params))
    except BaseException as exc:  # noqa: BLE001 - everything goes back as a readable traceback
        payload = {"ok": False, "error": f"{type(exc).__name__}: {exc}", "traceback": _user_traceback(exc, path)}
    sys.stdout.flush()
    _answer(answer_fd, payload)


if __name__ == "__main__":
    main()
