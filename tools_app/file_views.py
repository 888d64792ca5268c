"""`POST /files/versions/<id>/restore`: the Restore button on a filesystem call's card."""

from __future__ import annotations

from django.http import HttpRequest, JsonResponse

from navi_project.http import ApiError, json_view
from sessions_app.auth import api_login_required
from tools_app import file_versions
from tools_app.context import current_user_id
from tools_app.permissions import user_has_host_tools
from tools_app.safe_paths import PathRefused
from tools_app.workspace import file_roots, workspace_for


@api_login_required
@json_view("POST")
def restore_version(request: HttpRequest, version_id: str) -> JsonResponse:
    """Write one of the caller's kept versions back. Writing files is a host action, as the
    tool's own write is: without `run_host_tools` the answer is 403. Another user's version is
    never found (each user's store is their own folder): 404."""
    user = request.user
    if not user_has_host_tools(user.pk):
        raise ApiError("restoring a file writes to the server; it needs the 'run host tools' permission", 403)
    token = current_user_id.set(user.pk)
    try:
        roots = file_roots(True)
        text = file_versions.restore(version_id, user.pk, roots, str(workspace_for(user.pk)))
    except file_versions.NoVersion as exc:
        raise ApiError(str(exc), 404) from None
    except PathRefused as exc:
        raise ApiError(f"refused: {exc}", 403) from None
    except OSError as exc:
        raise ApiError(f"restore failed: {exc.strerror or exc}; check that the folder still exists", 409) from None
    finally:
        current_user_id.reset(token)
    return JsonResponse({"ok": True, "result": file_versions.MARK_RE.sub("", text).strip()})
