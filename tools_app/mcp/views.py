"""REST for MCP servers (DESIGN §9, §10): `/mcp/servers`, `/mcp/servers/<id>`, `/mcp/servers/<id>/test`,
and `/mcp/servers/import` (Claude Desktop's `mcpServers` JSON).

A user sees their own servers and the global ones (without how those run); another user's
server is a 404. Only staff with `run_host_tools` may add stdio servers (403)."""

from __future__ import annotations

from asgiref.sync import async_to_sync
from django.conf import settings
from django.db.models import Q
from django.http import HttpRequest, JsonResponse

from navi_project import fstree
from navi_project.http import ApiError, json_view, parse_json_body
from sessions_app.auth import api_login_required
from sessions_app.models import profile_model
from tools_app.mcp import client as mcp_client
from tools_app.mcp import service
from tools_app.mcp.config import ConfigError, ServerConfig, check_url_reachable, connect_timeout, data_dir
from tools_app.mcp.tools import block_text, text_cap
from tools_app.models import MCPServer

KNOWN = {"name", *service.EDITABLE}


def _visible(user):
    return MCPServer.objects.filter(Q(owner=user) | Q(owner__isnull=True))


def _get(user, server_id: int) -> MCPServer:
    server = _visible(user).filter(pk=server_id).first()
    if server is None:
        raise ApiError(f"no MCP server {server_id}; GET /mcp/servers lists yours", 404)
    return server


def _own(user, server_id: int) -> MCPServer:
    server = _get(user, server_id)
    if server.owner_id is None:
        raise ApiError("this is a global server, managed in the admin; only an administrator can change it", 403)
    return server


def _body(request: HttpRequest) -> dict:
    data = parse_json_body(request, allow_empty=False)
    unknown = set(data) - KNOWN
    if unknown:
        raise ApiError(f"unknown field(s) {', '.join(sorted(unknown))}; known: {', '.join(sorted(KNOWN))}", 400)
    profiles = data.get("profiles")
    if isinstance(profiles, list):
        known = set(profile_model().objects.values_list("pk", flat=True))
        missing = [p for p in profiles if p not in known]
        if missing:
            raise ApiError(f"unknown profile(s) {', '.join(map(str, missing))}; see GET /agents/profiles", 400)
    return data


def _save(request: HttpRequest, server: MCPServer, data: dict, *, creating: bool) -> MCPServer:
    try:
        server = service.save(server, data, request.user, creating=creating)
    except PermissionError as exc:
        raise ApiError(str(exc), 403) from None
    except ConfigError as exc:
        raise ApiError(str(exc), 400) from None
    return server


def _check_url(data: dict, server: MCPServer, *, creating: bool) -> None:
    """The field checks, then the web tools' SSRF rule, before anything is saved."""
    try:
        service.precheck(server, data, creating=creating)
    except ConfigError as exc:
        raise ApiError(str(exc), 400) from None
    url = data.get("url", server.url)
    if data.get("transport", server.transport) == "http" and isinstance(url, str) and url.strip():
        try:
            async_to_sync(check_url_reachable)(url.strip())
        except ConfigError as exc:
            raise ApiError(f"url refused: {exc}", 400) from None


def _connect_soon(server: MCPServer) -> None:
    """Start connecting in the background: the answer says `connecting` at once."""
    if server.enabled:
        hub = mcp_client.get_hub()
        hub.submit(hub.ensure(ServerConfig.from_row(server), 0))


@api_login_required
@json_view("GET", "POST")
def servers(request: HttpRequest) -> JsonResponse:
    if request.method == "GET":
        return JsonResponse([service.as_json(s) for s in _visible(request.user)], safe=False)
    server = _create(request, _body(request))
    _connect_soon(server)
    return JsonResponse(service.as_json(server), status=201)


def _create(request: HttpRequest, data: dict) -> MCPServer:
    """One server made the way POST /mcp/servers makes it (ApiError when refused)."""
    server = MCPServer(owner=request.user)
    if data.get("transport") == "stdio" and not service.may_run_stdio(request.user):
        raise ApiError(
            "only staff with the 'run host tools' permission may add stdio servers (they run programs on this "
            "machine); add an http server instead, or ask the owner", 403)
    _check_url(data, server, creating=True)
    return _save(request, server, data, creating=True)


@api_login_required
@json_view("POST")
def servers_import(request: HttpRequest) -> JsonResponse:
    """Claude Desktop's `{"mcpServers": {name: {command, args, env} | {url, headers}}}`: each
    entry checked like POST /mcp/servers; the bad ones are reported by name, the others made."""
    data = parse_json_body(request, allow_empty=False)
    entries = data.get("mcpServers")
    if not isinstance(entries, dict) or not entries:
        raise ApiError('expected {"mcpServers": {"name": {"command": ..., "args": [...]} or {"url": ...}}}, '
                       "as in Claude Desktop's claude_desktop_config.json", 400)
    if len(entries) > service.IMPORT_MAX:
        raise ApiError(f"{len(entries)} servers at once; import at most {service.IMPORT_MAX} per request", 400)
    made, errors = [], {}
    for name, entry in entries.items():
        try:
            fields = service.from_claude_entry(name, entry)
            made.append(_create(request, fields))
        except ConfigError as exc:
            errors[name] = str(exc)
        except ApiError as exc:
            errors[name] = exc.message
    for server in made:
        _connect_soon(server)
    return JsonResponse({"servers": [service.as_json(s) for s in made], "errors": errors}, status=201)


@api_login_required
@json_view("GET", "PATCH", "DELETE")
def server_detail(request: HttpRequest, server_id: int) -> JsonResponse:
    if request.method == "GET":
        return JsonResponse(service.as_json(_get(request.user, server_id)))
    server = _own(request.user, server_id)
    if request.method == "DELETE":
        server_pk = server.pk
        server.delete()
        for home in data_dir(server_pk).parent.glob(f"{server_pk}-uid*"):  # a home of the folders' own user
            fstree.rmtree(home, ignore_errors=True)
        fstree.rmtree(data_dir(server_pk), ignore_errors=True)  # its data folder goes with it
        return JsonResponse({"ok": True})
    data = _body(request)
    _check_url(data, server, creating=False)
    server = _save(request, server, data, creating=False)
    _connect_soon(server)
    return JsonResponse(service.as_json(server))


@api_login_required
@json_view("POST")
def server_test(request: HttpRequest, server_id: int) -> JsonResponse:
    server = _get(request.user, server_id)
    if not server.enabled:
        raise ApiError("the server is disabled; enable it first (PATCH {\"enabled\": true})", 409)
    return JsonResponse(service.as_json(service.test_connection(server)))


def _ask_server(request: HttpRequest, server_id: int, make) -> object:
    """Run one request on the server's connection (this process's hub), as a clear ApiError."""
    from mcp.shared.exceptions import MCPError

    server = _get(request.user, server_id)
    if not server.enabled:
        raise ApiError("the server is disabled; enable it first (PATCH {\"enabled\": true})", 409)
    hub = mcp_client.get_hub()
    limit = connect_timeout() + float(getattr(settings, "TOOL_TIMEOUT_S", 60))

    async def go():
        conn = await hub.connection(ServerConfig.from_row(server))
        return await make(conn)

    try:
        return hub.run_sync(go(), limit)
    except mcp_client.Unavailable as exc:
        raise ApiError(str(exc), 409) from None
    except MCPError as exc:
        raise ApiError(f"MCP server '{server.name}' answered with an error: {exc.error.message}; check the "
                       "name, URI or arguments against its list", 400) from None
    except TimeoutError:
        raise ApiError(f"MCP server '{server.name}' did not answer within {limit:g} s; try again later", 504) from None


@api_login_required
@json_view("GET")
def server_resource(request: HttpRequest, server_id: int) -> JsonResponse:
    """`GET /mcp/servers/<id>/resource?uri=...`: one resource's contents (text cut to
    MCP_MAX_RESULT_CHARS), to attach to a chat; marked as coming from outside."""
    uri = request.GET.get("uri", "")
    if not uri or len(uri) > 2000:
        raise ApiError("give the resource's uri (?uri=..., as listed in the server's resources)", 400)
    result = _ask_server(request, server_id, lambda conn: conn.read_resource(uri))
    cap = text_cap()
    contents = []
    for item in result.contents:
        entry = {"uri": str(item.uri), "mime_type": item.mime_type or ""}
        text = getattr(item, "text", None)
        if text is not None:
            entry["text"] = text[:cap]
            entry["cut"] = len(text) > cap
        else:
            entry["bytes"] = len(getattr(item, "blob", "") or "") * 3 // 4
        contents.append(entry)
    return JsonResponse({"uri": uri, "untrusted": True, "contents": contents})


@api_login_required
@json_view("POST")
def server_prompt(request: HttpRequest, server_id: int) -> JsonResponse:
    """`POST /mcp/servers/<id>/prompt {"name", "arguments"?}`: the prompt's messages (a slash
    command's text), each cut to MCP_MAX_RESULT_CHARS."""
    data = parse_json_body(request, allow_empty=False)
    name, arguments = data.get("name"), data.get("arguments", {})
    if not isinstance(name, str) or not name or len(name) > 200:
        raise ApiError("give the prompt's name, as listed in the server's prompts", 400)
    if not isinstance(arguments, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in arguments.items()):
        raise ApiError('arguments must be an object of strings, e.g. {"topic": "rust"}', 400)

    async def prompt_and_listing(conn):
        # Servers may leave the description out of prompts/get (the reference server does):
        # the one the server listed is shown then.
        result = await conn.get_prompt(name, arguments)  # connected now: its listing is there
        return result, next((p["description"] for p in conn.prompts if p.get("name") == name), "")

    result, listed = _ask_server(request, server_id, prompt_and_listing)
    cap = text_cap()
    messages = [{"role": message.role, "text": block_text(message.content)[:cap]} for message in result.messages]
    return JsonResponse({"name": name, "description": result.description or listed or "", "untrusted": True,
                         "messages": messages})
