"""`python -m navi_project.serve`: daphne's WebSocket handshake timeout comes from
WEBSOCKET_HANDSHAKE_TIMEOUT_S (daphne's own 5 s reset sockets of a loaded cluster), unless the
command line gives one."""

from __future__ import annotations

from navi_project.serve import with_handshake_timeout


def test_the_setting_is_the_default(settings) -> None:
    settings.WEBSOCKET_HANDSHAKE_TIMEOUT_S = 45
    argv = ["-b", "127.0.0.1", "-p", "8000", "navi_project.asgi:application"]
    assert with_handshake_timeout(argv) == ["--websocket_connect_timeout", "45", *argv]


def test_an_explicit_timeout_wins(settings) -> None:
    settings.WEBSOCKET_HANDSHAKE_TIMEOUT_S = 45
    for argv in (["--websocket_connect_timeout", "9", "app"], ["--websocket_connect_timeout=9", "app"]):
        assert with_handshake_timeout(argv) == argv
