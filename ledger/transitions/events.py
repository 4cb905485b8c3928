"""Applications' subscriptions to completion events: subscribe a URL (per agent, or per run),
remove it, and carry a run's subscriptions into its continuation. The events themselves are
queued by ``notify.notify_run_event`` in the transaction of each transition that ends or stops
a run, and delivered by ``ledger.processes.delivery`` (signed as Standard Webhooks).

A refused subscription (a URL that is not http(s) or points inside the network — the SSRF
policy of ``ledger.egress`` —, an unknown event, an unknown agent or run,
both or neither of agent and run) raises ``InvalidInput`` and writes nothing. When a person or
a service asks (``by``: ``cli:<login>``, ``api:<name>``), the change is audited.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.core.exceptions import ValidationError
from django.core.validators import URLValidator
from django.db import transaction
from django.utils import timezone

from ledger import egress, registry
from ledger.errors import InvalidInput, NotAllowed
from ledger.models import AuditAction, Run, WebhookSubscription
from ledger.teams import check_team
from ledger.transitions._common import Actor, Clock, actor_name, record
from ledger.webhooks import EVENT_TYPES, new_secret

MAX_URL_CHARS = 2000
#: The subscriptions one start may carry (``run_start_once(webhooks=...)``).
MAX_RUN_WEBHOOKS = 10
MAX_DESCRIPTION_CHARS = 200
_URL = URLValidator(schemes=["http", "https"])


def subscribe(
    url: str,
    *,
    agent: str | None = None,
    run_id: str | None = None,
    events: Iterable[str] | None = None,
    description: str = "",
    by: Actor | None = None,
    team: str = "",
    clock: Clock = timezone.now,
) -> tuple[WebhookSubscription, str]:
    """Subscribe ``url`` to the completion events of every run of ``agent``, or of the run
    ``run_id`` (exactly one of them), for ``events`` (all four when None). Returns the
    subscription and its signing secret (``whsec_…``): show it once, to the one who asked.
    ``team`` (an agent's subscription only): only that team's runs of the agent (a team's API
    token subscribes so); "" every team's.

    Call it in the transaction that starts a run to subscribe that run at its start.
    """
    name = actor_name(by) if by is not None else ""
    now = clock()
    with transaction.atomic():
        fields = check_subscription(
            url, agent=agent, run_id=run_id, events=events, description=description
        )
        if team and fields["agent"]:
            fields["team"] = check_team(team)
        secret = new_secret()
        subscription = WebhookSubscription.objects.create(
            **fields, secret=secret, created_at=now, created_by=name
        )
        if name:
            record(
                by=name,
                action=AuditAction.WEBHOOK_SUBSCRIBE,
                at=now,
                run_id=subscription.run_id,
                after=subscription_snapshot(subscription),
                reason=subscription.description or "subscribed to completion events",
            )
    return subscription, secret


def check_subscription(
    url: Any,
    *,
    agent: str | None = None,
    run_id: str | None = None,
    events: Iterable[str] | None = None,
    description: str = "",
) -> dict[str, Any]:
    """The fields of a subscription as ``subscribe`` would write them, or ``InvalidInput``
    saying what is wrong; writes nothing (a form checks with it before it subscribes)."""
    text = (description or "").strip()
    if len(text) > MAX_DESCRIPTION_CHARS:
        raise InvalidInput(f"a description is at most {MAX_DESCRIPTION_CHARS} characters")
    return {
        "url": _check_url(url),
        "events": _check_events(events),
        "description": text,
        "agent": "",
        "run_id": "",
        **_check_scope(agent=agent, run_id=run_id),
    }


def check_run_webhooks(webhooks: Any) -> list[dict[str, Any]]:
    """The per-run subscriptions a start asks for (``[{"url": …, "events": […]}]``), checked
    and in canonical form (``url``, ``events``, ``description``); ``InvalidInput`` saying which
    one is wrong. Writes nothing: a start checks them before it writes the run."""
    if webhooks is None:
        return []
    if not isinstance(webhooks, list | tuple):
        raise InvalidInput("webhooks: a list of {url, events} subscriptions")
    if len(webhooks) > MAX_RUN_WEBHOOKS:
        raise InvalidInput(f"webhooks: at most {MAX_RUN_WEBHOOKS} subscriptions per run")
    out = []
    for i, spec in enumerate(webhooks):
        if not isinstance(spec, dict):
            raise InvalidInput(f"webhooks[{i}]: a subscription is an object with url and events")
        unknown = sorted(set(spec) - {"url", "events", "description"})
        if unknown:
            raise InvalidInput(f"webhooks[{i}]: unknown field(s) {', '.join(unknown)}")
        try:
            text = (spec.get("description") or "").strip()
            if len(text) > MAX_DESCRIPTION_CHARS:
                raise InvalidInput(f"a description is at most {MAX_DESCRIPTION_CHARS} characters")
            out.append(
                {
                    "url": _check_url(spec.get("url")),
                    "events": _check_events(spec.get("events")),
                    "description": text,
                }
            )
        except InvalidInput as exc:
            raise InvalidInput(f"webhooks[{i}]: {exc}") from None
    return out


def subscribe_run_at_start(
    run: Run, specs: list[dict[str, Any]], *, by: Actor | None, clock: Clock = timezone.now
) -> list[tuple[WebhookSubscription, str]]:
    """Subscribe the checked ``specs`` (``check_run_webhooks``) to the run just written: call
    in the start's transaction, so the run and its subscriptions commit together or not at
    all. Each subscription with its secret, shown once."""
    return [
        subscribe(
            spec["url"],
            run_id=run.run_id,
            events=spec["events"],
            description=spec["description"],
            by=by,
            clock=clock,
        )
        for spec in specs
    ]


def unsubscribe(
    subscription_id: int, *, by: Actor | None = None, clock: Clock = timezone.now
) -> WebhookSubscription:
    """Remove a subscription: it gets no new events, and deliveries still waiting for it are
    given up. The row stays (its deliveries on the Notifications page name it)."""
    name = actor_name(by) if by is not None else ""
    now = clock()
    with transaction.atomic():
        found = WebhookSubscription.objects.select_for_update().filter(pk=subscription_id)
        subscription = found.first()
        if subscription is None:
            raise InvalidInput(f"there is no webhook subscription {subscription_id}")
        if subscription.removed_at is not None:
            raise NotAllowed(
                f"webhook subscription {subscription_id} was already removed "
                f"({subscription.removed_at:%Y-%m-%d %H:%M:%S} by "
                f"{subscription.removed_by or 'the system'})"
            )
        before = subscription_snapshot(subscription)
        found.update(removed_at=now, removed_by=name)
        subscription.refresh_from_db()
        if name:
            record(
                by=name,
                action=AuditAction.WEBHOOK_UNSUBSCRIBE,
                at=now,
                run_id=subscription.run_id,
                before=before,
                after=subscription_snapshot(subscription),
                reason="unsubscribed",
            )
    return subscription


def subscriptions_follow(*, from_run_id: str, to_run_id: str, clock: Clock = timezone.now) -> int:
    """Copy the live per-run subscriptions of a run to the run it continues as (same URL,
    events and secret), in the transaction that made the continuation."""
    rows = [
        WebhookSubscription(
            url=s.url,
            run_id=to_run_id,
            events=s.events,
            secret=s.secret,
            description=f"follows {from_run_id} (continued as new)"[:MAX_DESCRIPTION_CHARS],
            created_at=clock(),
            created_by=s.created_by,
        )
        for s in WebhookSubscription.objects.filter(run_id=from_run_id, removed_at__isnull=True)
    ]
    return len(WebhookSubscription.objects.bulk_create(rows)) if rows else 0


def _check_url(url: Any) -> str:
    if not isinstance(url, str) or not url.strip():
        raise InvalidInput("a subscription needs the URL to POST events to")
    text = url.strip()
    if len(text) > MAX_URL_CHARS:
        raise InvalidInput(f"the URL is longer than {MAX_URL_CHARS} characters")
    try:
        _URL(text)
    except ValidationError:
        raise InvalidInput(
            f"{text[:200]!r} is not an http(s) URL (e.g. https://app.example.com/hooks/runledger)"
        ) from None
    try:
        egress.check_url(text)
    except egress.Refused as exc:
        raise InvalidInput(f"{text[:200]!r} is refused as a webhook: {exc}") from None
    return text


def _check_events(events: Iterable[str] | None) -> list[str]:
    if events is None:
        return list(EVENT_TYPES)
    if isinstance(events, str):
        events = [e for e in events.replace(",", " ").split() if e]
    chosen = [str(e).strip() for e in events]
    unknown = sorted({e for e in chosen if e not in EVENT_TYPES})
    if unknown:
        raise InvalidInput(
            f"unknown event(s): {', '.join(unknown)}; the events are {', '.join(EVENT_TYPES)}"
        )
    if not chosen:
        raise InvalidInput(f"subscribe to at least one of {', '.join(EVENT_TYPES)}")
    return [e for e in EVENT_TYPES if e in chosen]


def _check_scope(*, agent: str | None, run_id: str | None) -> dict[str, str]:
    agent, run_id = (agent or "").strip(), (run_id or "").strip()
    if bool(agent) == bool(run_id):
        raise InvalidInput("subscribe either an agent's runs (agent=) or one run (run_id=)")
    if agent:
        if registry.get_agent(agent) is None:
            known = ", ".join(sorted(registry.agents())) or "none"
            raise InvalidInput(f"no agent named {agent!r} is registered (registered: {known})")
        return {"agent": agent}
    if not Run.objects.filter(pk=run_id).exists():
        raise InvalidInput(f"there is no run {run_id!r}")
    return {"run_id": run_id}


def subscription_snapshot(s: WebhookSubscription) -> dict[str, Any]:
    """A subscription as JSON, for the audit and for listings: never its secret."""
    return {
        "id": s.pk,
        "url": s.url,
        "agent": s.agent,
        "run_id": s.run_id,
        "team": s.team,
        "events": s.events,
        "description": s.description,
        "created_at": s.created_at.isoformat(),
        "created_by": s.created_by,
        "removed_at": s.removed_at.isoformat() if s.removed_at else None,
        "removed_by": s.removed_by,
    }
