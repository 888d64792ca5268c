"""Session file uploads and downloads.

Uploads land in SESSION_FILES_DIR/<session_id>/ under a sanitised name; size is capped
(Content-Length up front, then byte-counting while streaming to a temp file), and executables
are refused by extension and by magic bytes.
"""

from __future__ import annotations

import mimetypes
import os
import re
import shutil
import unicodedata
from pathlib import Path

from django.conf import settings
from django.core.files.uploadhandler import StopUpload, TemporaryFileUploadHandler
from django.http import FileResponse, HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt, csrf_protect

from navi_project.http import ApiError, json_view
from sessions_app.bodylimit import MULTIPART_OVERHEAD

from .auth import api_login_required
from .models import SessionFile
from .services import session_files_dir
from .views import _get_session_for_user

MAX_NAME_CHARS = 120
MAX_EXT_CHARS = 16
EXECUTABLE_EXTENSIONS = {
    ".sh", ".bash", ".zsh", ".csh", ".ksh", ".fish", ".py", ".pyw", ".pyc", ".pl", ".rb", ".php",
    ".exe", ".bat", ".cmd", ".com", ".msi", ".msp", ".scr", ".pif", ".cpl", ".dll", ".so", ".dylib",
    ".elf", ".bin", ".run", ".out", ".jar", ".ps1", ".psm1", ".vbs", ".vbe", ".js", ".jse", ".wsf",
    ".wsh", ".hta", ".app", ".apk", ".deb", ".rpm", ".appimage", ".command", ".ko", ".lnk", ".reg",
}
EXECUTABLE_MAGIC = (
    b"\x7fELF",  # Linux/BSD
    b"MZ",  # Windows PE
    b"\xfe\xed\xfa\xce", b"\xfe\xed\xfa\xcf", b"\xce\xfa\xed\xfe", b"\xcf\xfa\xed\xfe",  # Mach-O
    b"\xca\xfe\xba\xbe",  # Mach-O universal (and Java class files)
    b"#!",  # scripts with a shebang
)
_UNSAFE_CHARS = re.compile(r'[<>:"|?*\\/]')
# Types a browser could execute in our origin: never served inline, even when published.
_ACTIVE_TYPES = ("text/html", "image/svg+xml", "application/xhtml+xml", "text/xml", "application/xml", "text/javascript", "application/javascript")


def max_upload_bytes() -> int:
    return settings.SESSION_FILES_MAX_SIZE_MB * 1024 * 1024


def sanitize_filename(raw: str) -> str:
    """A safe base name: no directories, NUL/control chars or leading dots; length-capped
    keeping the extension. Never empty."""
    name = unicodedata.normalize("NFC", str(raw or "")).replace("\\", "/").split("/")[-1]
    name = "".join(ch for ch in name if unicodedata.category(ch)[0] != "C")
    # Trailing dots and spaces go too: Windows drops them, so `x.py.` would be stored as `x.py`.
    name = _UNSAFE_CHARS.sub("_", name).strip().lstrip(".").strip().rstrip(". ")
    if not name:
        return "upload"
    stem, ext = os.path.splitext(name)
    if len(ext) > MAX_EXT_CHARS or not stem:
        stem, ext = name, ""
    stem = stem[: MAX_NAME_CHARS - len(ext)].rstrip(" .") or "upload"
    return stem + ext


def is_executable(name: str, head: bytes) -> bool:
    """By extension (trailing dots and spaces ignored: `x.py.` is `x.py`) or by magic bytes."""
    suffixes = [s.lower() for s in Path(name.rstrip(". ")).suffixes]
    if suffixes and suffixes[-1] in EXECUTABLE_EXTENSIONS:
        return True
    return any(head.startswith(magic) for magic in EXECUTABLE_MAGIC)


class _LimitedUploadHandler(TemporaryFileUploadHandler):
    """Streams to a temp file and stops the upload as soon as it passes the size cap."""

    def __init__(self, request: HttpRequest, limit: int) -> None:
        super().__init__(request)
        self.limit = limit
        self.received = 0
        self.too_large = False

    def receive_data_chunk(self, raw_data: bytes, start: int) -> bytes | None:
        self.received += len(raw_data)
        if self.received > self.limit:
            self.too_large = True
            raise StopUpload(connection_reset=True)
        return super().receive_data_chunk(raw_data, start)


def _too_large() -> ApiError:
    return ApiError(
        f"file is larger than SESSION_FILES_MAX_SIZE_MB ({settings.SESSION_FILES_MAX_SIZE_MB} MB); "
        "split or compress it",
        413,
    )


def _store(folder: Path, name: str, upload) -> Path:
    """Create the file under a free name (`name`, `stem_1.ext`, ...) atomically: the upload's
    temp file linked there, or copied when it cannot be."""
    folder.mkdir(parents=True, exist_ok=True)
    stem, ext = os.path.splitext(name)
    taken = set(SessionFile.objects.filter(session_id=folder.name).values_list("name", flat=True))
    for n in range(0, 10_000):
        candidate = name if n == 0 else f"{stem}_{n}{ext}"
        if candidate in taken:
            continue
        dest = folder / candidate
        try:
            if not _link(upload, dest):
                _copy(upload, dest)
        except FileExistsError:
            continue
        return dest
    raise ApiError("too many files with this name in the session; rename the file", 409)


def _link(upload, dest: Path) -> bool:
    """Give the upload's temp file a second name at `dest` (fails if `dest` exists, like
    O_EXCL): a 200 MB upload is not written to disk once more. False when it cannot be linked
    (an upload kept in memory, or the temp dir on another filesystem)."""
    temp = getattr(upload, "temporary_file_path", None)
    if temp is None:
        return False
    try:
        os.link(temp(), dest, follow_symlinks=False)
    except FileExistsError:
        raise
    except OSError:
        return False
    os.chmod(dest, 0o640, follow_symlinks=False)
    return True


def _copy(upload, dest: Path) -> None:
    fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o640)
    with os.fdopen(fd, "wb") as out:
        upload.seek(0)
        shutil.copyfileobj(upload, out, 1024 * 1024)


@csrf_exempt  # the upload handler must be set before CSRF reads the body; checked just below
@api_login_required
@json_view("POST")
def upload_file(request: HttpRequest, session_id: str) -> JsonResponse:
    """POST /sessions/<id>/files (multipart, field `file`) → 201 {name, path, size}."""
    session = _get_session_for_user(request, session_id)
    length = request.META.get("CONTENT_LENGTH") or ""
    if length.isdigit() and int(length) > max_upload_bytes() + MULTIPART_OVERHEAD:
        raise _too_large()  # refused before a single byte of the body is read
    if request.content_type != "multipart/form-data":
        raise ApiError('send multipart/form-data with the file in a field named "file"', 400)
    request.upload_handlers = [_LimitedUploadHandler(request, max_upload_bytes())]
    return _receive_upload(request, session)


@csrf_protect
def _receive_upload(request: HttpRequest, session) -> JsonResponse:
    upload = request.FILES.get("file")
    if any(getattr(h, "too_large", False) for h in request.upload_handlers):
        raise _too_large()
    if upload is None:
        raise ApiError('no file received; send it in a multipart field named "file"', 400)
    try:
        name = sanitize_filename(upload.name)
        upload.seek(0)
        if is_executable(name, upload.read(8)):
            raise ApiError(f"'{name}' looks like an executable or script; executables cannot be uploaded", 400)
        folder = Path(session_files_dir(session.id))
        dest = _store(folder, name, upload)
    finally:
        upload.close()
    row = SessionFile.objects.create(session=session, name=dest.name, path=str(dest), size=dest.stat().st_size)
    return JsonResponse({"name": row.name, "path": row.path, "size": row.size}, status=201)


@api_login_required
@json_view("GET")
def download_file(request: HttpRequest, session_id: str, name: str):
    """GET /sessions/<id>/files/<name>: the owner's file, as an attachment unless published."""
    session = _get_session_for_user(request, session_id)
    row = SessionFile.objects.filter(session=session, name=name).first()
    folder = Path(session_files_dir(session.id)).resolve()
    path = Path(row.path).resolve() if row else None
    if row is None or path is None or not path.is_relative_to(folder) or not path.is_file():
        raise ApiError(f"no file '{name}' in this session; list the session's files or upload it again", 404)
    mime = mimetypes.guess_type(row.name)[0] or "application/octet-stream"
    inline = row.published and mime not in _ACTIVE_TYPES
    try:  # O_NOFOLLOW: a symlink swapped in after the check is not served
        handle = os.fdopen(os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC), "rb")
    except OSError:
        raise ApiError(f"no file '{name}' in this session; list the session's files or upload it again", 404) from None
    response = FileResponse(handle, as_attachment=not inline, filename=row.name, content_type=mime)
    response["X-Content-Type-Options"] = "nosniff"
    response["Content-Security-Policy"] = "default-src 'none'; sandbox"
    return response
