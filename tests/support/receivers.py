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


class EventReceiver:
    """An application's endpoint for completion events on loopback: keeps each request as
    (headers, raw body) exactly as received. ``hold()`` makes it take requests without
    answering until ``release()`` (a receiver slower than the deliverer's timeout)."""

    def __init__(
        self, port: int | None = None, path: str = "/hooks/runledger", host: str = "127.0.0.1"
    ) -> None:
        self.port = port or free_port()
        self.url = f"http://{host}:{self.port}{path}"
        self.requests: list[tuple[dict[str, str], bytes]] = []
        self._answer = threading.Event()
        self._answer.set()
        self._lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                with outer._lock:
                    outer.requests.append(({k.lower(): v for k, v in self.headers.items()}, body))
                outer._answer.wait(timeout=120)
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer((host, self.port), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def hold(self) -> None:
        self._answer.clear()

    def release(self) -> None:
        self._answer.set()

    def received(self) -> list[tuple[dict[str, str], bytes]]:
        with self._lock:
            return list(self.requests)

    def taken(self) -> dict[str, dict[str, Any]]:
        """What an application that deduplicates by ``webhook-id`` acts on: one event per id."""
        return {h["webhook-id"]: json.loads(body) for h, body in self.received()}

    def stop(self) -> None:
        self.release()
        self.server.shutdown()
        self.server.server_close()
