"""The SSRF policy of completion events (issue 30, security), at delivery: the default refuses
loopback; the deliverer checks the URL again at each attempt after resolving the name, and
connects to the address it checked (a DNS-rebinding name answering differently the second time
is never asked twice); a redirect is a failed delivery, never followed. The receivers are real
HTTP servers on loopback addresses; the name of the rebinding test is answered by a resolver
the test installs in place of the system's."""

from __future__ import annotations

import ipaddress
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from ledger import egress, events, transitions
from ledger.conf import DECLARED
from ledger.errors import InvalidInput
from ledger.models import DeliveryStatus, Notification, Run, WebhookSubscription
from ledger.processes import delivery
from tests.support import event_agents
from tests.support.receivers import EventReceiver, free_port

pytestmark = pytest.mark.django_db(transaction=True)

AGENT = event_agents.events_echo.name


@pytest.fixture
def receiver() -> Iterator[EventReceiver]:
    r = EventReceiver()
    yield r
    r.stop()


def finished_run(execute: Any, clock: Any) -> Run:
    run = transitions.run_start(agent=AGENT, inputs={"n": 1}, clock=clock)
    assert execute(run.run_id).status == "succeeded"
    return run


def test_the_default_policy_refuses_loopback(settings: Any, receiver: EventReceiver) -> None:
    assert DECLARED["RUNLEDGER_WEBHOOK_ALLOWED_NETWORKS"].default == []
    del settings.RUNLEDGER_WEBHOOK_ALLOWED_NETWORKS  # the declared default, as a deployment has
    for url in (
        receiver.url,
        f"http://[::1]:{receiver.port}/",
        f"http://localhost:{receiver.port}/",
    ):
        with pytest.raises(InvalidInput, match="RUNLEDGER_WEBHOOK_ALLOWED_NETWORKS"):
            events.subscribe(url, agent=AGENT)
    assert not WebhookSubscription.objects.exists()


def test_the_allow_list_lets_a_receiver_inside_the_network_through(settings: Any) -> None:
    settings.RUNLEDGER_WEBHOOK_ALLOWED_NETWORKS = ["10.20.0.0/16", "hooks.internal.example"]
    events.subscribe("http://10.20.3.4/hook", agent=AGENT)
    events.subscribe("https://hooks.internal.example/hook", agent=AGENT)
    with pytest.raises(InvalidInput, match="private"):
        events.subscribe("http://10.21.0.1/hook", agent=AGENT)
    assert WebhookSubscription.objects.count() == 2


@pytest.mark.parametrize(
    ("address", "why"),
    [
        ("169.254.169.254", "link-local"),
        ("fd00:ec2::254", "private"),
        ("::ffff:127.0.0.1", "loopback"),
        ("64:ff9b::a00:1", "private"),  # NAT64 of 10.0.0.1
        ("100.64.0.1", "shared"),
        ("0.0.0.0", "unspecified"),
        ("240.0.0.1", "reserved"),
        ("ff02::1", "multicast"),
    ],
)
def test_each_kind_of_inside_address_is_named(settings: Any, address: str, why: str) -> None:
    settings.RUNLEDGER_WEBHOOK_ALLOWED_NETWORKS = []
    assert why in egress.blocked_because(ipaddress.ip_address(address))


def test_old_forms_of_a_loopback_address_are_refused(settings: Any) -> None:
    settings.RUNLEDGER_WEBHOOK_ALLOWED_NETWORKS = []
    for host in ("127.1", "2130706433", "0x7f.0.0.1"):
        with pytest.raises(egress.Refused, match="loopback"):
            egress.check_url(f"http://{host}/hook")
    assert egress.blocked_because(ipaddress.ip_address("93.184.216.34")) == ""


def test_a_delivery_checks_the_address_again(
    execute: Any, clock: Any, settings: Any, receiver: EventReceiver
) -> None:
    subscription, _ = events.subscribe(receiver.url, agent=AGENT)
    finished_run(execute, clock)
    settings.RUNLEDGER_WEBHOOK_ALLOWED_NETWORKS = []  # the allow-list narrowed since
    assert [d.ok for d in delivery.deliver_due(clock=clock)] == [False]
    row = Notification.objects.get(subscription=subscription)
    assert row.status == DeliveryStatus.PENDING and "refused by the webhook policy" in (
        row.last_error
    )
    assert "loopback" in row.last_error
    assert receiver.received() == []


def test_a_rebinding_name_is_resolved_once_and_the_checked_address_is_the_one_reached(
    execute: Any, clock: Any, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    port = free_port()
    allowed = EventReceiver(port, host="127.0.0.2")  # the address the check passes
    attacker = EventReceiver(port, host="127.0.0.1")  # where the name points a moment later
    try:
        settings.RUNLEDGER_WEBHOOK_ALLOWED_NETWORKS = ["127.0.0.2/32"]
        system = socket.getaddrinfo
        asked: list[str] = []

        def rebinding(host: Any, *args: Any, **kwargs: Any) -> Any:
            if host != "hooks.rebind.test":
                return system(host, *args, **kwargs)
            asked.append(host)
            answer = "127.0.0.2" if len(asked) == 1 else "127.0.0.1"
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (answer, port))]

        monkeypatch.setattr(socket, "getaddrinfo", rebinding)
        subscription, _ = events.subscribe(f"http://hooks.rebind.test:{port}/h", agent=AGENT)
        finished_run(execute, clock)
        assert [d.ok for d in delivery.deliver_due(clock=clock)] == [True]
        [(headers, _)] = allowed.received()
        assert headers["host"] == f"hooks.rebind.test:{port}" and headers["webhook-id"]
        assert attacker.received() == [] and asked == ["hooks.rebind.test"]
        assert Notification.objects.get(subscription=subscription).status == DeliveryStatus.SENT
    finally:
        allowed.stop()
        attacker.stop()


def test_a_name_resolving_to_any_inside_address_is_refused(settings: Any) -> None:
    settings.RUNLEDGER_WEBHOOK_ALLOWED_NETWORKS = []

    def split(host: Any, port: Any, **_: Any) -> Any:
        return [
            (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("93.184.216.34", port)),
            (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("10.0.0.7", port)),
        ]

    with pytest.raises(egress.Refused, match=r"resolves to 10\.0\.0\.7 is a private address"):
        egress.resolve("hooks.example.com", 443, resolver=split)


class Redirecting:
    """A receiver answering every request (any method: urllib follows a 302 with a GET) with
    a 302 to ``location``, counting them."""

    def __init__(self, location: str) -> None:
        self.hits = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                self.do_GET()

            def do_GET(self) -> None:
                outer.hits += 1
                self.send_response(302)
                self.send_header("Location", location)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def redirects() -> Iterator[tuple[Redirecting, Redirecting]]:
    """(where the subscription points, where it redirects to)."""
    target = Redirecting("http://127.0.0.1:9/")
    first = Redirecting(target.url)
    yield first, target
    first.stop()
    target.stop()


def test_a_redirect_is_a_failed_delivery_and_never_followed(
    execute: Any, clock: Any, redirects: tuple[Redirecting, Redirecting]
) -> None:
    first, target = redirects
    subscription, _ = events.subscribe(first.url, agent=AGENT)
    finished_run(execute, clock)
    assert [d.ok for d in delivery.deliver_due(clock=clock)] == [False]
    row = Notification.objects.get(subscription=subscription)
    assert row.status == DeliveryStatus.PENDING and "HTTP 302" in row.last_error
    assert (first.hits, target.hits) == (1, 0)


def test_the_operators_webhook_does_not_follow_a_redirect_either(
    settings: Any, redirects: tuple[Redirecting, Redirecting]
) -> None:
    first, target = redirects
    settings.RUNLEDGER_NOTIFY_WEBHOOK_URL = first.url
    row = Notification(channel="webhook", subject="s", payload={}, idempotency_key="k1")
    with pytest.raises(delivery.DeliveryError, match="HTTP 302"):
        delivery.send(row)
    assert (first.hits, target.hits) == (1, 0)
