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


class PagingReceivers:
    """The paging services on loopback, each speaking its own format and keeping what it got:

    - ``/pagerduty/v2/enqueue``: PagerDuty's Events API v2 — a ``routing_key``, an
      ``event_action`` (trigger, acknowledge, resolve) and a ``dedup_key``; a trigger needs a
      ``payload`` with ``summary``, ``source`` and ``severity``. Like PagerDuty, a trigger on a
      ``dedup_key`` whose incident is open joins it (no new incident), an acknowledge or resolve
      changes that incident, and a trigger after a resolve opens a new one. Answers 202.
    - ``/opsgenie/v2/alerts`` (create: ``message``, ``alias``) and
      ``/opsgenie/v2/alerts/<alias>/acknowledge|close?identifierType=alias``, with
      ``Authorization: GenieKey <key>``: an open alert's alias folds a repeated create into it
      (its ``count`` grows), as Opsgenie's de-duplication does. Answers 202.
    - ``/slack``: an incoming webhook's ``{"text": …}``; every message is a line (Slack has no
      key to fold on). Answers 200 ``ok``.
    - ``/hook``: a Standard Webhook, verified with ``secret`` (``verify_webhook``); kept by
      ``webhook-id``.

    A malformed request is answered 400 and kept in ``refused``. ``down()`` makes every path
    answer 503 until ``up()``.
    """

    def __init__(self, *, routing_key: str, genie_key: str, secret: str) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.routing_key, self.genie_key, self.secret = routing_key, genie_key, secret
        self.pagerduty: list[dict[str, Any]] = []  # every event received, in order
        self.pd_incidents: list[dict[str, Any]] = []  # {"dedup_key", "status", "triggers"}
        self.opsgenie: list[tuple[str, dict[str, Any]]] = []  # (verb, body)
        self.og_alerts: list[dict[str, Any]] = []  # {"alias", "status", "count", "acked_by"}
        self.slack: list[str] = []
        self.hook: list[tuple[str, dict[str, Any]]] = []  # (webhook-id, event)
        self.refused: list[tuple[str, str]] = []
        self._down = False
        self._lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if outer._down:
                    self._answer(503, b"down")
                    return
                with outer._lock:
                    status, text = outer._take(self.path, dict(self.headers.items()), body)
                self._answer(status, text)

            def _answer(self, status: int, text: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Length", str(len(text)))
                self.end_headers()
                self.wfile.write(text)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def receivers_setting(self) -> str:
        """``RUNLEDGER_ALERT_RECEIVERS`` naming the four, on this server."""
        return json.dumps({
            "pd": {"type": "pagerduty", "url": f"{self.base}/pagerduty/v2/enqueue",
                   "routing_key": self.routing_key},
            "og": {"type": "opsgenie", "url": f"{self.base}/opsgenie", "api_key": self.genie_key},
            "slack": {"type": "slack", "url": f"{self.base}/slack"},
            "hook": {"type": "webhook", "url": f"{self.base}/hook", "secret": self.secret},
        })  # fmt: skip

    def down(self) -> None:
        self._down = True

    def up(self) -> None:
        self._down = False

    def _refuse(self, path: str, why: str) -> tuple[int, bytes]:
        self.refused.append((path, why))
        return 400, why.encode()

    def _take(self, path: str, headers: dict[str, str], body: bytes) -> tuple[int, bytes]:
        lowered = {k.lower(): v for k, v in headers.items()}
        if path == "/pagerduty/v2/enqueue":
            return self._pagerduty(path, json.loads(body))
        if path.startswith("/opsgenie/v2/alerts"):
            if lowered.get("authorization") != f"GenieKey {self.genie_key}":
                return self._refuse(path, "no GenieKey")
            return self._opsgenie(path, json.loads(body))
        if path == "/slack":
            text = json.loads(body).get("text")
            if not isinstance(text, str) or not text:
                return self._refuse(path, "no text")
            self.slack.append(text)
            return 200, b"ok"
        if path == "/hook":
            from ledger.webhooks import WebhookVerificationError, verify_webhook

            try:
                # Signed at the deliverer's clock, which the tests move: the signature is checked,
                # the timestamp's freshness is not.
                event = verify_webhook(body, lowered, self.secret, tolerance=10**9)
            except WebhookVerificationError as exc:
                return self._refuse(path, str(exc))
            self.hook.append((lowered["webhook-id"], event))
            return 204, b""
        return self._refuse(path, "unknown path")

    def _pagerduty(self, path: str, event: dict[str, Any]) -> tuple[int, bytes]:
        action, key = event.get("event_action"), event.get("dedup_key")
        if event.get("routing_key") != self.routing_key or not key:
            return self._refuse(path, "routing_key or dedup_key")
        if action not in ("trigger", "acknowledge", "resolve"):
            return self._refuse(path, f"event_action {action!r}")
        payload = event.get("payload") or {}
        if action == "trigger" and not all(
            payload.get(k) for k in ("summary", "source", "severity")
        ):
            return self._refuse(path, "a trigger's payload needs summary, source, severity")
        self.pagerduty.append(event)
        open_ = [
            i for i in self.pd_incidents if i["dedup_key"] == key and i["status"] != "resolved"
        ]
        if action == "trigger":
            if open_:
                open_[0]["triggers"] += 1  # folded into the open incident: no new page
            else:
                self.pd_incidents.append({"dedup_key": key, "status": "triggered", "triggers": 1})
        elif open_:
            open_[0]["status"] = "acknowledged" if action == "acknowledge" else "resolved"
        return 202, json.dumps({"status": "success", "dedup_key": key}).encode()

    def _opsgenie(self, path: str, body: dict[str, Any]) -> tuple[int, bytes]:
        from urllib.parse import unquote, urlsplit

        parts = urlsplit(path)
        rest = parts.path.removeprefix("/opsgenie/v2/alerts").strip("/")
        if not rest:
            alias = body.get("alias")
            if not body.get("message") or not alias:
                return self._refuse(path, "create needs message and alias")
            self.opsgenie.append(("create", body))
            open_ = [a for a in self.og_alerts if a["alias"] == alias and a["status"] != "closed"]
            if open_:
                open_[0]["count"] += 1
            else:
                self.og_alerts.append(
                    {"alias": alias, "status": "open", "count": 1, "acked_by": ""}
                )
            return 202, b'{"result":"Request will be processed"}'
        alias, _, verb = rest.rpartition("/")
        alias = unquote(alias)
        if verb not in ("acknowledge", "close") or parts.query != "identifierType=alias":
            return self._refuse(path, "acknowledge or close by alias")
        self.opsgenie.append((verb, {**body, "alias": alias}))
        for a in self.og_alerts:
            if a["alias"] == alias and a["status"] != "closed":
                a["status"] = "acked" if verb == "acknowledge" else "closed"
                a["acked_by"] = body.get("user", "") if verb == "acknowledge" else a["acked_by"]
        return 202, b'{"result":"Request will be processed"}'

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
