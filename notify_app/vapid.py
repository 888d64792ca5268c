"""The server's VAPID key pair (settings.VAPID_PRIVATE_KEY): signs every push, and its public
half is what a browser subscribes with."""

from __future__ import annotations

import functools

from cryptography.hazmat.primitives import serialization
from django.conf import settings
from py_vapid import Vapid
from py_vapid.utils import b64urlencode


@functools.cache
def _load(private_key: str) -> Vapid:
    key = private_key.strip()
    if "-----BEGIN" in key:
        return Vapid.from_pem(key.encode())
    return Vapid.from_string(key)  # raw 32-byte key or DER, base64url


def vapid() -> Vapid:
    """The signer for the configured key (parsed once per key)."""
    return _load(settings.VAPID_PRIVATE_KEY)


def public_key() -> str:
    """The public key as the browser's `applicationServerKey` wants it: base64url, uncompressed point."""
    point = vapid().public_key.public_bytes(
        serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint
    )
    return b64urlencode(point)
