"""The alert rules' evaluator: each pass reads every rule's condition (one cheap query per rule,
``ledger.selectors.alerts``) and brings the rule's incidents in line
(``ledger.transitions.alerts_apply``: open and page, keep, resolve and page). Celery beat runs it
on the control queue (``runledger.alerts``, every ``RUNLEDGER_ALERT_EVERY_SECONDS``), followed
by a delivery of the pages; ``runledger evaluate_alerts`` does the same by hand.

A pass that dies anywhere loses nothing and pages nothing twice: a rule's changes commit with
their pages, the next pass finds what the dead one did not commit, and the pages are the
notification outbox's (claimed, retried with back-off, sent again under the same key after a
deliverer died between sending and recording).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from django.utils import timezone

from ledger import alert_rules, faultpoints, observe
from ledger.conf import conf
from ledger.errors import InvalidInput
from ledger.models import Alert
from ledger.selectors.alerts import condition
from ledger.transitions import Actor
from ledger.transitions import alerts as alert_transitions

log = logging.getLogger(__name__)

Clock = Callable[[], datetime]


@dataclass(frozen=True)
class Configured:
    rules: list[alert_rules.Rule]
    receivers: dict[str, alert_rules.Receiver]

    def rule(self, name: str) -> alert_rules.Rule | None:
        return next((r for r in self.rules if r.name == name), None)


def configured() -> Configured:
    """The rules and receivers of the settings (checked at start-up: see ``ledger.conf``)."""
    receivers = alert_rules.parse_receivers(conf.RUNLEDGER_ALERT_RECEIVERS)
    return Configured(alert_rules.parse_rules(conf.RUNLEDGER_ALERT_RULES, receivers), receivers)


@dataclass
class Pass:
    opened: list[str] = field(default_factory=list)  # dedup keys
    resolved: list[str] = field(default_factory=list)
    kept: int = 0


def alerts_evaluate(*, clock: Clock = timezone.now) -> Pass:
    """One pass over every rule."""
    config = configured()
    done = Pass()
    for rule in config.rules:
        found = condition(rule, now=clock(), listed=conf.RUNLEDGER_ALERT_RUNS_LISTED)
        applied = alert_transitions.alerts_apply(
            rule=rule, found=found, receivers=config.receivers, clock=clock
        )
        done.opened += [a.dedup_key for a in applied.opened]
        done.resolved += [a.dedup_key for a in applied.resolved]
        done.kept += applied.kept
        faultpoints.point("alerts.after_rule")  # this rule's changes and pages are committed
    done.resolved += [
        a.dedup_key
        for a in alert_transitions.alerts_resolve_orphans(
            rules=[r.name for r in config.rules], receivers=config.receivers, clock=clock
        )
    ]
    for key in done.opened:
        log.warning("alert opened: %s", key)
        observe.emit("alert", outcome="opened")
    for key in done.resolved:
        log.info("alert resolved: %s", key)
        observe.emit("alert", outcome="resolved")
    return done


def alert_acknowledge(
    *, alert_id: int, by: Actor, clock: Clock = timezone.now
) -> alert_transitions.Acked:
    """Acknowledge an incident as ``by`` (who is then on its runs); see the transition."""
    config = configured()
    rule_name = Alert.objects.filter(pk=alert_id).values_list("rule", flat=True).first()
    if rule_name is None:
        raise InvalidInput(f"no alert {alert_id}")
    return alert_transitions.alert_acknowledge(
        alert_id=alert_id,
        by=by,
        rule=config.rule(rule_name),
        receivers=config.receivers,
        clock=clock,
    )
