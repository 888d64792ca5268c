"""Self-extension: write_tool's checks, history and restore, the other self-extension tools, and
the whole story through the agent loop (write → use in the next message → break → restore)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from agent.frames.events import to_frame
from agent.models import Profile
from agent.registry import get_agent
from tests.llm_server import Turn
from tools_app import user_tools
from tools_app.models import UserTool

pytestmark = pytest.mark.django_db(transaction=True)

GREET = '''
name = "greet"
description = "Greet someone by name."
parameters = {"type": "object", "properties": {"who": {"type": "string"}}, "required": ["who"]}

async def execute(params: dict) -> str:
    return "Hello, " + params["who"] + "!"
'''


async def call(tool: str, **params):
    return await get_agent().tools.call(tool, params)


async def test_write_tool_reports_exactly_what_is_missing(settings):
    result = await call("write_tool", name="greet", code='name = "greet"\ndescription = "x"\n')
    assert not result.success
    assert "missing required module-level definitions: parameters, execute" in result.error
    assert "nothing was written" in result.error
    assert not (settings.TOOLS_DIR / "greet.py").exists()


async def test_a_plain_function_becomes_a_tool_with_its_arguments_as_parameters(settings):
    code = 'def word_count(text: str, minimum: int = 1):\n    """Count the words in a text."""\n    return len(text.split())\n'
    result = await call("write_tool", name="word_count", code=code)
    assert result.success and "a plain function" in result.output, result.error
    tool = get_agent().tools.get("word_count")
    assert tool.description == "Count the words in a text."
    assert tool.parameters["properties"] == {"text": {"type": "string"}, "minimum": {"type": "integer"}}
    assert tool.parameters["required"] == ["text"]
    assert (await call("test_tool", name="word_count", params={"text": "one two three"})).output.strip().endswith("3")
    source = (settings.TOOLS_DIR / "word_count.py").read_text()
    assert source.startswith(code.rstrip()) and "async def execute(params: dict) -> str:" in source


async def test_a_wrapped_function_cannot_smuggle_code_through_its_name_or_docstring(settings):
    doc = 'def shout(text: str):\n    """Loud.\\n"); import os; os.system("touch /tmp/pwned"); ("""\n    return text\n'
    result = await call("write_tool", name='shout"); import os; ("', code=doc)
    assert not result.success and "valid Python identifier" in result.error  # the name is checked after wrapping too
    assert list(settings.TOOLS_DIR.glob("*.py")) == []
    wrapped = user_tools.wrap_function("shout", doc)
    tree = ast.parse(wrapped)  # the docstring went in as a string literal, nothing more
    assert [type(n).__name__ for n in tree.body] == ["FunctionDef", "Assign", "Assign", "Assign", "AsyncFunctionDef"]
    assert isinstance(tree.body[2].value, ast.Constant) and tree.body[2].value.value == "Loud."  # its first line, as data
    assert (await call("write_tool", name="shout", code=doc)).success
    assert not Path("/tmp/pwned").exists()


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ("def a(x):\n    return x\n\ndef b(x):\n    return x\n", "missing required module-level definitions"),  # which one?
        ('name = "shout"\ndef shout(text):\n    return text\n', "missing required module-level definitions"),  # half a tool
        ("def shout(*words):\n    return words\n", "missing required module-level definitions"),  # no named parameters
        ("def shout(text):\n    return undefined_name(\n", "SyntaxError"),
        ("async def shout(text):\n    return text.upper() + '!'\n", ""),  # an async function is awaited
    ],
)
async def test_what_is_not_a_single_plain_function_is_not_wrapped(settings, code, expected):
    result = await call("write_tool", name="shout", code=code)
    if expected:
        assert not result.success and expected in result.error, result.error
        assert not (settings.TOOLS_DIR / "shout.py").exists()
    else:
        assert result.success and "a plain function" in result.output
        assert "HELLO!" in (await call("test_tool", name="shout", params={"text": "hello"})).output


@pytest.mark.parametrize(
    ("name", "code", "expected"),
    [
        ("_hidden", GREET, "must not start with '_'"),
        ("bad-name", GREET, "valid Python identifier"),
        ("list_tools", GREET.replace('"greet"', '"list_tools"'), "is a built-in tool"),
        ("hello", GREET, "name = 'greet' in the code must equal the tool name 'hello'"),
        ("greet", GREET.replace("async def", "def"), "`execute` must be async"),
        ("greet", GREET + "\ndef broken(:\n    pass\n", "SyntaxError at line 9"),
        ("greet", "import no_such_module_xyz\n" + GREET, "ModuleNotFoundError: No module named 'no_such_module_xyz'"),
        ("greet", GREET.replace('"Greet someone by name."', "42"), "`description` must be a string"),
    ],
)
async def test_write_tool_rejects_bad_tools_and_writes_nothing(settings, name, code, expected):
    result = await call("write_tool", name=name, code=code)
    assert not result.success and expected in result.error, result.error
    assert list(settings.TOOLS_DIR.glob("*.py")) == []


async def test_write_tool_import_errors_come_with_the_traceback(settings):
    code = GREET + "\nraise RuntimeError('config missing')\n"
    result = await call("write_tool", name="greet", code=code)
    assert "RuntimeError: config missing" in result.error and 'greet.py", line 9' in result.error


async def test_write_tool_writes_enables_and_reloads(settings):
    result = await call("write_tool", name="greet", code=GREET)
    assert result.success and "next message" in result.output and "test_tool" in result.output
    assert (settings.TOOLS_DIR / "greet.py").read_text() == GREET
    row = await UserTool.objects.aget(name="greet")
    assert (row.enabled, row.created_by, row.last_error) == (True, "agent", "")
    assert get_agent().tools.user_tool_names() == ["greet"]
    assert (await call("greet", who="Ann")).output == "Hello, Ann!"


async def test_rewrites_and_deletes_keep_history_and_restore_brings_it_back(settings):
    await call("write_tool", name="greet", code=GREET)
    await call("write_tool", name="greet", code=GREET.replace("Hello", "Bye"))
    assert (await call("greet", who="Ann")).output == "Bye, Ann!"
    versions = user_tools.history_versions("greet")
    assert len(versions) == 1
    await user_tools.arestore_tool_version("greet", versions[0])
    assert (await call("greet", who="Ann")).output == "Hello, Ann!"
    assert len(user_tools.history_versions("greet")) == 2  # the Bye version was kept too
    deleted = await call("delete_tool", name="greet")
    assert deleted.success and "restore" in deleted.output
    assert get_agent().tools.user_tool_names() == [] and not await UserTool.objects.filter(name="greet").aexists()
    await user_tools.arestore_tool_version("greet", user_tools.history_versions("greet")[0])
    assert (await call("greet", who="Ann")).output == "Hello, Ann!"
    with pytest.raises(user_tools.ToolFileError, match="pick one of"):
        user_tools.restore_version("greet", "../../etc/passwd")


async def test_delete_tool_refuses_builtins_and_unknown_tools():
    assert "built-in" in (await call("delete_tool", name="write_tool")).error
    assert "no user tool file" in (await call("delete_tool", name="nope")).error


async def test_list_tools_is_the_live_list_with_failures(settings):
    await call("write_tool", name="greet", code=GREET)
    (settings.TOOLS_DIR / "broken.py").write_text("name = 'broken'\n")
    await call("reload_tools")
    listing = (await call("list_tools")).output
    assert "- write_tool: Create or replace a user tool" in listing
    assert "User tools:\n- greet: Greet someone by name." in listing
    assert "- broken: missing required module-level definitions: description, parameters, execute" in listing


async def test_reload_tools_reports_loaded_and_failed(settings):
    (settings.TOOLS_DIR / "greet.py").write_text(GREET)
    (settings.TOOLS_DIR / "broken.py").write_text("def (:\n")
    result = await call("reload_tools")
    assert "Loaded 1 user tool(s): greet." in result.output and "FAILED broken: SyntaxError" in result.output


async def test_tool_manual_serves_files_or_generates_from_the_schema(settings):
    manual = (await call("tool_manual", name="write_tool")).output
    assert "## Required code format" in manual and "user_tools/" in manual
    await call("write_tool", name="greet", code=GREET)
    generated = (await call("tool_manual", name="greet")).output
    assert "# greet — Manual" in generated and "- `who` (string, required)" in generated
    assert "no tool named 'nope'" in (await call("tool_manual", name="nope")).error
    assert not (await call("tool_manual", name="../settings")).success


async def test_test_tool_returns_output_or_traceback(settings):
    (settings.TOOLS_DIR / "greet.py").write_text(GREET)
    assert (await call("test_tool", name="greet", params={"who": "Bo"})).output == "Hello, Bo!"
    missing = await call("test_tool", name="greet", params={})
    assert "'who' is a required property" in missing.error
    (settings.TOOLS_DIR / "greet.py").write_text(GREET.replace('"Hello, "', "1"))
    failed = await call("test_tool", name="greet", params={"who": "Bo"})
    assert "TypeError" in failed.error and 'greet.py", line 7, in execute' in failed.error
    assert "there is no user tool nope.py" in (await call("test_tool", name="nope")).error


async def test_a_user_tool_is_limited_in_memory_and_file_size(settings):
    settings.SANDBOX_MEMORY_MB, settings.SANDBOX_MAX_FILE_MB = 256, 1
    (settings.TOOLS_DIR / "hog.py").write_text(HOG)
    hungry = await call("test_tool", name="hog", params={"what": "memory"})
    assert not hungry.success and "MemoryError" in hungry.error
    writer = await call("test_tool", name="hog", params={"what": "file"})
    assert not writer.success and "File too large" in writer.error
    assert (await call("test_tool", name="hog", params={"what": "nothing"})).output == "fine"


HOG = '''
import os
name = "hog"
description = "Uses too much of something."
parameters = {"type": "object", "properties": {"what": {"type": "string"}}, "required": ["what"]}

async def execute(params: dict) -> str:
    if params["what"] == "memory":
        return str(len(bytearray(1024 ** 3)))
    if params["what"] == "file":
        with open(os.path.join(os.environ["NAVI_TOOL_DATA"], "big.bin"), "wb") as f:
            f.write(b"x" * 5_000_000)
    return "fine"
'''


def _tool_names(request: dict) -> list[str]:
    """The tools a call offers: sent natively, or (the default step) the branches of its schema."""
    branches = [b["properties"]["name"]["const"] for b in (request.get("format") or {}).get("anyOf", [])]
    return [t["function"]["name"] for t in request.get("tools") or []] + [n for n in branches if n != "answer"]


async def test_the_model_writes_a_tool_uses_it_next_message_breaks_it_and_it_is_restored(llm, session, settings, host_tools_allowed):
    await Profile.objects.aupdate(planning_enabled=False)
    agent = get_agent()
    write = {"name": "write_tool", "arguments": {"name": "greet", "code": GREET}}
    llm.script(Turn(tool_calls=[write]), Turn(content="I wrote greet."))
    frames = [to_frame(e) async for e in agent.run_stream(str(session.id), "make a greeting tool")]
    call_frame = next(f for f in frames if f["type"] == "tool_call")
    assert call_frame["success"] and "written to user_tools/greet.py" in call_frame["result"]
    assert not any("greet" in _tool_names(r) for r in llm.requests)  # not offered within the same message

    first = len(llm.requests)
    llm.script(Turn(tool_calls=[{"name": "greet", "arguments": {"who": "Ann"}}]), Turn(content="Done."))
    frames = [to_frame(e) async for e in agent.run_stream(str(session.id), "greet Ann")]
    assert "greet" in _tool_names(llm.requests[first])
    used = next(f for f in frames if f["type"] == "tool_call")
    assert (used["tool"], used["success"], used["result"]) == ("greet", True, "Hello, Ann!")

    broken = {"name": "write_tool", "arguments": {"name": "greet", "code": GREET.replace("async def execute", "async def run")}}
    llm.script(Turn(tool_calls=[broken]), Turn(content="That failed."))
    frames = [to_frame(e) async for e in agent.run_stream(str(session.id), "rename execute")]
    failed = next(f for f in frames if f["type"] == "tool_call")
    assert not failed["success"] and "missing required module-level definitions: execute" in failed["result"]

    assert (settings.TOOLS_DIR / "greet.py").read_text() == GREET  # the rejected rewrite changed nothing

    rewrite = {"name": "write_tool", "arguments": {"name": "greet", "code": GREET.replace("Hello", "Bye")}}
    llm.script(Turn(tool_calls=[rewrite]), Turn(content="Rewritten."))
    [e async for e in agent.run_stream(str(session.id), "make it say bye")]
    assert (await agent.tools.call("greet", {"who": "Bo"})).output == "Bye, Bo!"
    await user_tools.arestore_tool_version("greet", user_tools.history_versions("greet")[0])  # what admin does
    llm.script(Turn(tool_calls=[{"name": "greet", "arguments": {"who": "Bo"}}]), Turn(content="Done."))
    frames = [to_frame(e) async for e in agent.run_stream(str(session.id), "greet Bo")]
    assert next(f for f in frames if f["type"] == "tool_call")["result"] == "Hello, Bo!"


@pytest.fixture
def admin_client(django_user_model):
    from django.test import Client

    client = Client()
    client.force_login(django_user_model.objects.create_superuser("boss", password="x" * 12))
    return client


def test_admin_disables_reloads_and_restores(settings, admin_client):
    from asgiref.sync import async_to_sync

    async_to_sync(call)("write_tool", name="greet", code=GREET)
    async_to_sync(call)("write_tool", name="greet", code=GREET.replace("Hello", "Bye"))
    row = UserTool.objects.get(name="greet")
    changelist = "/admin/tools_app/usertool/"
    page = admin_client.get(changelist)
    assert page.status_code == 200 and b"Reload tools" in page.content
    admin_client.post(changelist, {"action": "disable", "_selected_action": [row.pk]})
    assert get_agent().tools.user_tool_names() == []
    admin_client.post(changelist, {"action": "enable", "_selected_action": [row.pk]})
    assert get_agent().tools.user_tool_names() == ["greet"]
    detail = admin_client.get(f"{changelist}{row.pk}/change/")
    version = user_tools.history_versions("greet")[0]
    assert version.encode() in detail.content
    confirm = admin_client.get(f"{changelist}restore/greet/{version}/")
    assert b"Hello, " in confirm.content
    assert admin_client.post(f"{changelist}restore/greet/{version}/").status_code == 302
    assert "Hello" in (settings.TOOLS_DIR / "greet.py").read_text()
    assert admin_client.get(f"{changelist}restore/greet/19990101T000000000000Z/").status_code == 404
    assert admin_client.get(f"{changelist}history/").status_code == 200
    (settings.TOOLS_DIR / "broken.py").write_text("def (:\n")
    admin_client.post(f"{changelist}reload/")
    assert "SyntaxError" in UserTool.objects.get(name="broken").last_error


def test_reload_tools_command(settings, capsys):
    from django.core.management import call_command

    (settings.TOOLS_DIR / "greet.py").write_text(GREET)
    call_command("reload_tools")
    assert "loaded 1 user tool(s): greet" in capsys.readouterr().out
    (settings.TOOLS_DIR / "broken.py").write_text("def (:\n")
    with pytest.raises(SystemExit):
        call_command("reload_tools")
    assert "FAILED broken: SyntaxError" in capsys.readouterr().out
