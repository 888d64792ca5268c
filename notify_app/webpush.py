"""Web Push: a browser's push subscription as a target (RFC 8030 + VAPID, aes128gcm payload).

pywebpush encrypts the payload; the request itself goes through navi_project.netguard, so a
subscription whose endpoint points into the LAN is refused like a web tool's URL would be.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import time
from typing import Any

import httpx
from cryptography.hazmat.primitives.asymmetric import ec
from django.conf import settings

from navi_project import netguard
from navi_project.lazy import lazy_module

from .senders import BadTarget, DeliveryFailed, Notification
from .vapid import vapid

pywebpush = lazy_module("pywebpush")  # with aiohttp and requests ~150 ms of boot; first used by a push

MAX_ENDPOINT = 2000
TTL_S = 12 * 3600  # a device that is off gets the notification when it is back within this time
SUBSCRIPTION_HELP = "send the browser's PushSubscription as JSON: {endpoint, keys: {p256dh, auth}}"


def _b64(value: Any, name: str) -> bytes:
    if not isinstance(value, str) or not value or len(value) > 200:
        raise BadTarget(f"subscription.keys.{name} must be a base64url string; {SUBSCRIPTION_HELP}")
    try:
        return base64.urlsafe_b64decode(value + "=" * (-len(value) % 4))
    except (binascii.Error, ValueError):
        raise BadTarget(f"subscription.keys.{name} is not base64url; {SUBSCRIPTION_HELP}") from None


def _parse_endpoint(endpoint: Any) -> httpx.URL:
    """The endpoint parsed: https only (http for a local push service when allowed), no DNS."""
    if not isinstance(endpoint, str) or not endpoint or len(endpoint) > MAX_ENDPOINT:
        raise BadTarget(f"subscription.endpoint is missing or too long; {SUBSCRIPTION_HELP}")
    try:
        url = netguard.parse_url(endpoint)
    except netguard.URLRefused as exc:
        raise BadTarget(f"subscription.endpoint: {exc}") from None
    if url.scheme != "https" and not settings.NOTIFY_ALLOW_HTTP_PUSH:
        raise BadTarget("subscription.endpoint must be an https:// URL (a browser's push service)")
    return url


def check_endpoint(endpoint: Any) -> httpx.URL:
    """_parse_endpoint, and its host must not resolve into the LAN (sync: for the view)."""
    url = _parse_endpoint(endpoint)
    try:
        netguard.resolve_checked_sync(url.host, url.port or (443 if url.scheme == "https" else 80), url.scheme)
    except netguard.HostUnresolved:
        pass  # checked again, address by address, at every delivery
    except netguard.URLRefused as exc:
        raise BadTarget(f"subscription.endpoint: {exc}") from None
    return url


class WebPushSender:
    kind = "webpush"

    def clean(self, data: dict[str, Any]) -> dict[str, Any]:
        sub = data.get("subscription")
        if not isinstance(sub, dict):
            raise BadTarget(f"'subscription' is missing; {SUBSCRIPTION_HELP}")
        keys = sub.get("keys")
        if not isinstance(keys, dict):
            raise BadTarget(f"subscription.keys is missing; {SUBSCRIPTION_HELP}")
        check_endpoint(sub.get("endpoint"))
        p256dh, auth = _b64(keys.get("p256dh"), "p256dh"), _b64(keys.get("auth"), "auth")
        try:
            ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), p256dh)
        except ValueError:
            raise BadTarget("subscription.keys.p256dh is not a P-256 public key; send the browser's own keys") from None
        if len(auth) != 16:
            raise BadTarget("subscription.keys.auth must be 16 bytes (base64url); send the browser's own keys")
        return {"subscription": {"endpoint": sub["endpoint"], "keys": {"p256dh": keys["p256dh"], "auth": keys["auth"]}}}

    def describe(self, target: Any) -> str:
        """The push service's origin only: the endpoint's path is the subscription's secret."""
        try:
            url = httpx.URL(target.subscription.get("endpoint", ""))
            return f"{url.scheme}://{url.netloc.decode()}/…"
        except (AttributeError, httpx.InvalidURL, TypeError):
            return "(invalid subscription)"

    async def send(self, target: Any, note: Notification) -> None:
        sub = target.subscription
        try:
            url = _parse_endpoint(sub.get("endpoint"))
            body = pywebpush.WebPusher(sub).encode(json.dumps(note.payload()).encode(), "aes128gcm")["body"]
        except (BadTarget, pywebpush.WebPushException, ValueError, TypeError) as exc:  # a bad row (made in the admin)
            raise DeliveryFailed(f"{exc}; remove this target and enable push on the device again") from None
        headers = {
            **vapid().sign(
                {
                    "sub": settings.VAPID_SUBJECT,
                    "aud": f"{url.scheme}://{url.netloc.decode()}",
                    "exp": int(time.time()) + 12 * 3600,
                }
            ),
            "TTL": str(TTL_S),
            "Content-Encoding": "aes128gcm",
            "Content-Type": "application/octet-stream",
            "Urgency": "high" if "approval" in note.tag else "normal",  # wakes a sleeping phone
        }
        if topic := re.sub(r"[^A-Za-z0-9_-]", "", note.tag)[:32]:
            headers["Topic"] = topic  # the push service keeps only the newest undelivered one
        try:
            result = await netguard.fetch(
                str(url), "POST", headers=headers, content=body, timeout=settings.NOTIFY_TIMEOUT_S, max_bytes=4096
            )
        except netguard.URLRefused as exc:
            raise DeliveryFailed(str(exc)) from None
        except httpx.TimeoutException:
            raise DeliveryFailed(f"the push service at {url.host} did not answer in time; try again later") from None
        except httpx.HTTPError as exc:
            raise DeliveryFailed(
                f"could not reach the push service at {url.host} ({type(exc).__name__}); check the server's network"
            ) from None
        _raise_for_status(result.status, url.host)


def _raise_for_status(status: int, host: str) -> None:
    if status < 300:
        return
    if status in (404, 410):
        raise DeliveryFailed(
            f"the push subscription has expired (HTTP {status} from {host}) and was removed; "
            "enable push on that device again",
            expired=True,
        )
    if status in (401, 403):
        raise DeliveryFailed(
            f"the push service refused Navi's VAPID signature (HTTP {status}); if the server's VAPID key "
            "changed, remove this target and enable push on the device again"
        )
    if status == 413:
        raise DeliveryFailed("the push service refused the message as too large (HTTP 413)")
    if status == 429:
        raise DeliveryFailed(f"the push service at {host} is rate-limiting Navi (HTTP 429); try again later")
    raise DeliveryFailed(f"the push service at {host} answered HTTP {status}; try again later")
