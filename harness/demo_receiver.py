"""The demo's webhook receiver: the other end of the notification channel `make demo`
configures, on loopback, so a newcomer sees how an operator is paged.

``python -m harness.demo_receiver --port 8001 --log var/demo-received.jsonl`` keeps every POST
(its path, the delivery headers — Idempotency-Key, webhook-id/-timestamp/-signature — and the
body) in the JSON-lines file and answers 200; ``GET /`` is a page of what it received, newest
first (every value escaped), ``GET /received.json`` the same as JSON. Equipment: never in the
wheel.
"""

from __future__ import annotations

import argparse
import html
import json
import threading
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

HEADERS = (
    "Content-Type",
    "Idempotency-Key",
    "webhook-id",
    "webhook-timestamp",
    "webhook-signature",
)
#: Requests shown on the page (the file keeps them all).
SHOWN = 200
MAX_BODY = 1_000_000


class Store:
    """What was received: appended to a JSON-lines file, read back for the page."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.lock = threading.Lock()
        path.parent.mkdir(parents=True, exist_ok=True)

    def add(self, entry: dict[str, Any]) -> None:
        with self.lock, self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(entry, ensure_ascii=False) + "\n")

    def newest(self, limit: int = SHOWN) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        with self.lock:
            lines = self.path.read_text(encoding="utf-8").splitlines()
        return [json.loads(line) for line in reversed(lines[-limit:]) if line.strip()]


def page(entries: list[dict[str, Any]]) -> str:
    rows = []
    for e in entries:
        body = e["body"]
        summary = body.get("event") or body.get("type") or "" if isinstance(body, dict) else ""
        rows.append(
            "<li><p><b>{}</b> {} <code>{}</code></p><p>{}</p><pre>{}</pre></li>".format(
                html.escape(e["at"]),
                html.escape(str(summary)),
                html.escape(e["path"]),
                html.escape(", ".join(f"{k}: {v}" for k, v in e["headers"].items())),
                html.escape(json.dumps(body, indent=2, ensure_ascii=False)[:20000]),
            )
        )
    items = "\n".join(rows) or "<li>Nothing yet: block a run, or let one finish.</li>"
    return (
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        "<title>What the demo's webhook received</title>"
        "<style>body{font-family:system-ui,sans-serif;margin:1rem auto;max-width:60rem;"
        "padding:0 1rem}pre{white-space:pre-wrap;overflow-wrap:anywhere;background:#f6f7f9;"
        "padding:.5rem}li{border-bottom:1px solid #ddd;margin-bottom:.5rem}</style></head>"
        "<body><main><h1>What the demo's webhook received</h1>"
        f"<p>{len(entries)} request(s), newest first; this page does not refresh itself.</p>"
        f"<ol reversed>{items}</ol></main></body></html>"
    )


def serve(port: int, store: Store, host: str = "127.0.0.1") -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = min(int(self.headers.get("Content-Length") or 0), MAX_BODY)
            raw = self.rfile.read(length).decode("utf-8", "replace")
            try:
                body: Any = json.loads(raw)
            except ValueError:
                body = raw
            headers = {h: self.headers[h] for h in HEADERS if self.headers.get(h)}
            at = datetime.now(UTC).isoformat(timespec="seconds")
            store.add({"at": at, "path": self.path, "headers": headers, "body": body})
            self._answer(200, "text/plain", "ok")

        def do_GET(self) -> None:
            if self.path.startswith("/received.json"):
                self._answer(200, "application/json", json.dumps(store.newest()))
            elif self.path in ("/", "/index.html"):
                self._answer(200, "text/html; charset=utf-8", page(store.newest()))
            else:
                self._answer(404, "text/plain", "not here")

        def _answer(self, status: int, kind: str, text: str) -> None:
            data = text.encode("utf-8")
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    return ThreadingHTTPServer((host, port), Handler)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, default=8001)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--log", type=Path, default=Path("demo-received.jsonl"))
    options = parser.parse_args(argv)
    serve(options.port, Store(options.log), options.host).serve_forever()


if __name__ == "__main__":
    main()
