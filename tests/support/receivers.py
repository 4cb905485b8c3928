"""Real receivers on loopback for the notification tests: a webhook (HTTP) receiver that keeps
each request, and an SMTP mailbox for aiosmtpd."""

from __future__ import annotations

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Receiver:
    """A webhook receiver on loopback: keeps each request as (Idempotency-Key, JSON body)."""

    def __init__(self, port: int | None = None) -> None:
        self.port = port or free_port()
        self.requests: list[tuple[str, dict[str, Any]]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                outer.requests.append((self.headers["Idempotency-Key"], json.loads(body)))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def taken(self) -> dict[str, dict[str, Any]]:
        """What a receiver that honours the key processes: one message per key."""
        return dict(self.requests)

    def events(self) -> list[str]:
        """The events received, sorted, a reminder with what waited (``reminder:run``)."""
        return sorted(
            b["event"] + (":" + b["waiting"] if b.get("waiting") else "") for _, b in self.requests
        )

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class Mailbox:
    """An aiosmtpd handler that keeps every message."""

    def __init__(self) -> None:
        self.messages: list[Any] = []

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        self.messages.append(envelope)
        return "250 OK"
