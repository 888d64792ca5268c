"""image_view: load an image (allowed local file or http(s) URL) for the model to look at.

The result carries `metadata={"is_image": True, "base64": ...}`; the loop injects it into the
LLM context only, never the display history. The type is decided by Pillow from the bytes
(magic), not the name; big images are downscaled and re-encoded to keep the context small.
"""

from __future__ import annotations

import asyncio
import base64
import io
import os
from pathlib import Path
from typing import Any

from navi_project.lazy import lazy_module
from navi_project.netguard import URLRefused, fetch
from tools_app.base import Tool, ToolResult
from tools_app.builtin.session_files import PathRefused, open_readable

Image = lazy_module("PIL.Image")  # ~30 ms of boot for one tool (navi_project.lazy)

MAX_INPUT_BYTES = 20 * 1024 * 1024
MAX_PIXELS = 50_000_000  # refuse decompression bombs before decoding
MAX_SIDE = 1568
ALLOWED_FORMATS = {"PNG", "JPEG", "GIF", "WEBP"}
PASS_THROUGH = {"PNG", "JPEG"}  # sent as is when small enough; GIF/WEBP are re-encoded
MAX_PASS_THROUGH_BYTES = 3 * 1024 * 1024


class ImageRefused(Exception):
    """The data is not a usable image; the message says what to do."""


def prepare_image(data: bytes) -> tuple[str, str]:
    """(base64, description) of an image, checked and downscaled if needed."""
    try:
        img = Image.open(io.BytesIO(data))
        fmt = img.format
    except (Image.UnidentifiedImageError, OSError, Image.DecompressionBombError):
        raise ImageRefused("the data is not a PNG, JPEG, GIF or WEBP image") from None
    if fmt not in ALLOWED_FORMATS:
        raise ImageRefused(f"{fmt} images are not supported; convert it to PNG or JPEG first")
    width, height = img.size
    if width * height > MAX_PIXELS:
        raise ImageRefused(f"the image is {width}x{height} pixels, too large to decode safely; downscale it first")
    try:
        img.load()
    except (OSError, Image.DecompressionBombError) as exc:
        raise ImageRefused(f"the image is damaged ({exc}); try another copy") from None
    desc = f"{fmt}, {width}x{height}"
    if fmt in PASS_THROUGH and max(width, height) <= MAX_SIDE and len(data) <= MAX_PASS_THROUGH_BYTES:
        return base64.b64encode(data).decode(), desc
    img.thumbnail((MAX_SIDE, MAX_SIDE))
    has_alpha = img.mode in ("RGBA", "LA", "PA") or (img.mode == "P" and "transparency" in img.info)
    out = io.BytesIO()
    if has_alpha:
        img.convert("RGBA").save(out, format="PNG", optimize=True)
        encoded = "PNG"
    else:
        img.convert("RGB").save(out, format="JPEG", quality=85)
        encoded = "JPEG"
    if img.size != (width, height):
        desc += f", downscaled to {img.size[0]}x{img.size[1]}"
    desc += f", re-encoded as {encoded}"
    return base64.b64encode(out.getvalue()).decode(), desc


async def _load(source: str) -> tuple[bytes, str]:
    if source.lower().startswith(("http://", "https://")):
        res = await fetch(source, max_bytes=MAX_INPUT_BYTES)
        if res.status >= 400:
            raise ImageRefused(f"{res.url} answered HTTP {res.status}; check the URL")
        if res.truncated:
            raise ImageRefused(f"the image is larger than {MAX_INPUT_BYTES // (1024 * 1024)} MB; use a smaller version")
        return res.body, res.url
    handle, path = await open_readable(source)
    with handle:
        if os.fstat(handle.fileno()).st_size > MAX_INPUT_BYTES:
            raise ImageRefused(f"{path.name} is larger than {MAX_INPUT_BYTES // (1024 * 1024)} MB; use a smaller version")
        return await asyncio.to_thread(handle.read, MAX_INPUT_BYTES + 1), str(path)


class ImageViewTool(Tool):
    name = "image_view"
    keywords = "image picture photo screenshot look see png jpg jpeg gif"
    examples = (
        "what is in this photo?",
        "look at the screenshot and tell me what the error says",
        "describe the picture I uploaded",
        "read the text in this image",
    )
    description = (
        "Look at an image: a file path (workspace or this session's uploaded files) or an http(s) "
        "URL. The image becomes visible to you in your next step. PNG, JPEG, GIF, WEBP."
    )
    parameters = {
        "type": "object",
        "properties": {"path_or_url": {"type": "string", "description": "file path or http(s) URL of the image"}},
        "required": ["path_or_url"],
    }

    async def execute(self, params: dict[str, Any]) -> ToolResult:
        source = params["path_or_url"].strip()
        try:
            data, where = await _load(source)
            b64, desc = await asyncio.to_thread(prepare_image, data)
        except (ImageRefused, PathRefused, URLRefused) as exc:
            return ToolResult(False, error=str(exc))
        except Exception as exc:  # network errors from fetch
            return ToolResult(False, error=f"could not load {source}: {type(exc).__name__}: {exc}; check the path or URL")
        name = Path(where).name or where
        return ToolResult(
            True,
            f"Loaded image {name} ({desc}, {len(data) // 1024} KB). It is attached to your next step: describe or use what you see.",
            metadata={"is_image": True, "base64": b64},
        )
