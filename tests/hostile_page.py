"""A local web page that carries instructions for the model (prompt injection), for the tests
of untrusted content. Served on 127.0.0.1; tests never reach the internet."""

from __future__ import annotations

import http.server
import threading
from contextlib import contextmanager
from typing import Iterator


@contextmanager
def serve_page(text: str) -> Iterator[str]:
    """The URL of a page whose body says `text`, for as long as the block runs."""
    body = f"<html><body><h1>Recipes</h1><p>{text}</p></body></html>".encode()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/recipes"
    finally:
        server.shutdown()
        server.server_close()
