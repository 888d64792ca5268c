"""User-tool files and their UserTool rows: validation before a write, history of every
version (`user_tools/.history/<name>/<timestamp>.py`), restore, delete, and the table sync."""

from __future__ import annotations

import ast
import keyword
import logging
import re
import shutil
import tempfile
from datetime import datetime, timezone
from pathlib import Path

from asgiref.sync import sync_to_async

from navi_project import fstree

from .loader import check_file, tools_dir
from .models import UserTool
from .signals import user_tools_changed

log = logging.getLogger(__name__)

REQUIRED = ("name", "description", "parameters", "execute")
_VERSION = re.compile(r"^\d{8}T\d{12}Z$")


class ToolFileError(ValueError):
    """A tool name, version or file that cannot be used; the message says what to do."""


# --- names and paths -------------------------------------------------------------------------
def check_name(name: str, builtin_names: set[str] | frozenset[str] = frozenset()) -> str | None:
    if not isinstance(name, str) or not name:
        return "name must be a non-empty string"
    if name.startswith("_"):
        return f"name {name!r} must not start with '_' (files starting with '_' are never loaded)"
    if not name.isidentifier() or keyword.iskeyword(name) or not name.isascii():
        return f"name {name!r} must be a valid Python identifier (letters, digits, '_'; e.g. 'task_manager')"
    if name in builtin_names:
        return f"name {name!r} is a built-in tool; choose another name"
    return None


def tool_path(name: str) -> Path:
    problem = check_name(name)
    if problem:
        raise ToolFileError(problem)
    return tools_dir() / f"{name}.py"


def history_dir(name: str) -> Path:
    return tools_dir() / ".history" / name


# --- validation of new code ------------------------------------------------------------------
def check_source(name: str, code: str) -> str | None:
    """Static checks of write_tool: the four definitions, name = filename, compiles, async."""
    try:
        tree = ast.parse(code, filename=f"{name}.py")
    except SyntaxError as exc:
        pointer = ""
        if exc.text:
            pointer = f"\n    {exc.text.rstrip()}\n    {' ' * max((exc.offset or 1) - 1, 0)}^"
        return f"SyntaxError at line {exc.lineno}: {exc.msg}{pointer}\nFix the code and call write_tool again."
    found: dict[str, ast.AST] = {}
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        for target in targets:
            if isinstance(target, ast.Name) and target.id in REQUIRED:
                found[target.id] = node
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == "execute":
            found["execute"] = node
    missing = [d for d in REQUIRED if d not in found]
    if missing:
        return (
            "missing required module-level definitions: " + ", ".join(missing)
            + ". Every tool defines name, description, parameters and `async def execute(params) -> str`; "
            "call tool_manual('write_tool') for the format."
        )
    if not isinstance(found["execute"], ast.AsyncFunctionDef):
        return "`execute` must be async: write `async def execute(params: dict) -> str:`"
    value = getattr(found["name"], "value", None)
    if isinstance(value, ast.Constant) and value.value != name:
        return f"name = {value.value!r} in the code must equal the tool name {name!r} (the file is {name}.py)"
    try:
        compile(code, f"{name}.py", "exec")
    except (SyntaxError, ValueError) as exc:
        return f"the code does not compile: {exc}"
    return None


_JSON_TYPES = {"str": "string", "int": "integer", "float": "number", "bool": "boolean", "list": "array", "dict": "object"}


def wrap_function(name: str, code: str) -> str | None:
    """A plain function given as a tool (what a small model writes), with the four definitions
    added around it; None when the code is not that (it defines any of them, does not parse, or
    has no single function to wrap). The function is the one named `name`, else the only public
    top-level one. Its parameters become the tool's (type from the annotation, str otherwise;
    those with a default optional), its docstring's first line the description."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return None
    defined = {t.id for node in tree.body for t in _targets(node) if isinstance(t, ast.Name)}
    functions = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    if defined & set(REQUIRED) or any(f.name == "execute" for f in functions):
        return None
    named = [f for f in functions if f.name == name] or [f for f in functions if not f.name.startswith("_")]
    if len(named) != 1:
        return None
    function = named[0]
    args = function.args
    if args.vararg or args.kwarg or args.posonlyargs:
        return None
    plain = args.args
    optional = {a.arg for a in plain[len(plain) - len(args.defaults):]} if args.defaults else set()
    optional |= {a.arg for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None}
    properties, required = {}, []
    for arg in [*plain, *args.kwonlyargs]:
        kind = _JSON_TYPES.get(arg.annotation.id if isinstance(arg.annotation, ast.Name) else "str", "string")
        properties[arg.arg] = {"type": kind}
        if arg.arg not in optional:
            required.append(arg.arg)
    doc = (ast.get_docstring(function) or "").strip().splitlines()
    description = doc[0] if doc else f"{name}({', '.join(properties)})"
    schema = {"type": "object", "properties": properties, "required": required}
    call = f"{'await ' if isinstance(function, ast.AsyncFunctionDef) else ''}{function.name}(**params)"
    return (
        f"{code.rstrip()}\n\n\n"
        f"# Added by write_tool: the tool definitions around {function.name}().\n"
        f"name = {name!r}\n"
        f"description = {description!r}\n"
        f"parameters = {schema!r}\n\n\n"
        f"async def execute(params: dict) -> str:\n"
        f"    return str({call})\n"
    )


def _targets(node: ast.AST) -> list:
    if isinstance(node, ast.Assign):
        return node.targets
    return [node.target] if isinstance(node, ast.AnnAssign) else []


def check_in_child(name: str, code: str) -> str | None:
    """Import the candidate in a sandboxed child before it replaces anything. The import runs
    with a throwaway workspace and no network (loader.child_command "meta"), so a rejected
    candidate leaves no trace; its staging copy is removed here."""
    staging = tools_dir() / ".staging"
    staging.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(dir=staging))  # concurrent write_tools never share a file
    candidate = folder / f"{name}.py"
    candidate.write_text(code, encoding="utf-8")
    candidate.chmod(0o644)  # as root the sandbox runs as an unprivileged user, who must read it
    try:
        meta = check_file(candidate)
    finally:
        fstree.rmtree(folder, ignore_errors=True)
    if not meta.get("ok"):
        return f"the tool failed to import: {meta.get('error')}"
    names = [t["name"] for t in meta.get("tools", [])]
    if meta.get("format") != "module" or names != [name]:
        return f"the file must define the module-level tool {name!r} (found {names or 'none'})"
    return None


# --- history, write, delete, restore -------------------------------------------------------------
def _stamp() -> str:
    return datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")


def keep_history(name: str) -> str | None:
    """Copy the current file into the history; returns the version id, or None if no file."""
    path = tool_path(name)
    if not path.exists():
        return None
    target_dir = history_dir(name)
    target_dir.mkdir(parents=True, exist_ok=True)
    version = _stamp()
    while (target_dir / f"{version}.py").exists():
        version = _stamp()
    shutil.copy2(path, target_dir / f"{version}.py")
    return version


def save_tool(name: str, code: str) -> Path:
    """Write the file atomically, keeping the previous version."""
    path = tool_path(name)
    path.parent.mkdir(parents=True, exist_ok=True)
    keep_history(name)
    tmp = path.with_name(f".{name}.py.tmp")
    tmp.write_text(code, encoding="utf-8")
    tmp.chmod(0o644)  # readable by the sandbox user (tools_app.sandbox) whatever the umask
    tmp.replace(path)
    return path


def delete_tool_file(name: str) -> str:
    """Remove the file (a history copy is kept); returns the history version id."""
    path = tool_path(name)
    if not path.exists():
        raise ToolFileError(f"there is no user tool file {path.name}; call list_tools to see the user tools")
    version = keep_history(name)
    path.unlink()
    return version or ""


def history_versions(name: str) -> list[str]:
    """Saved versions, newest first."""
    directory = history_dir(name)
    if not directory.is_dir():
        return []
    return sorted((p.stem for p in directory.glob("*.py") if _VERSION.match(p.stem)), reverse=True)


def restore_version(name: str, version: str) -> Path:
    """Bring back a saved version (the current file goes to the history first)."""
    if not _VERSION.match(version or ""):
        raise ToolFileError(f"unknown version {version!r}; pick one of {history_versions(name)}")
    source = history_dir(name) / f"{version}.py"
    if not source.is_file():
        raise ToolFileError(f"no saved version {version} of {name}; pick one of {history_versions(name)}")
    return save_tool(name, source.read_text(encoding="utf-8"))


# --- the UserTool table ------------------------------------------------------------------------
def mark_written(name: str, created_by: str) -> None:
    """After write_tool/restore: the tool is enabled and we note who wrote it."""
    path = str(tool_path(name))
    row, created = UserTool.objects.get_or_create(name=name, defaults={"path": path, "created_by": created_by})
    if not created:
        row.enabled = True
        row.created_by = created_by
        row.path = path
        row.save(update_fields=["enabled", "created_by", "path", "updated_at"])


def restore_tool_version(name: str, version: str, created_by: str = "owner") -> Path:
    """What the admin's restore does: file back, row enabled, registry reloaded."""
    path = restore_version(name, version)
    mark_written(name, created_by)
    user_tools_changed.send(sender=restore_tool_version, name=name)
    return path


arestore_tool_version = sync_to_async(restore_tool_version)
