"""Alert rules and receivers as the settings declare them (``RUNLEDGER_ALERT_RULES``,
``RUNLEDGER_ALERT_RECEIVERS``: JSON text), parsed and checked once; imports no Django.

A rule::

    {"name": "blocked-15m", "kind": "blocked_longer", "minutes": 15, "per": "agent",
     "to": ["pagerduty", "slack"], "severity": "critical"}

``kind`` is one of ``KINDS``; ``per`` splits the rule into one incident per agent (``agent``),
per team (``team``), per gated tool (``tool``, gate rules only) or one for everything (``""``,
the default); ``teams`` restricts it to the runs of those teams (``["payments"]``: that team's
rule, paging that team's receivers); ``to`` names receivers (default: every receiver). A receiver::

    {"pagerduty": {"type": "pagerduty", "routing_key": "…"},
     "opsgenie": {"type": "opsgenie", "api_key": "…", "url": "https://api.eu.opsgenie.com"},
     "slack": {"type": "slack", "url": "https://hooks.slack.com/services/…"},
     "hook": {"type": "webhook", "url": "https://ops.example.com/runledger", "secret": "whsec_…"}}

Rules live in the settings, not in a table: they are the deployment's paging policy, reviewed
and versioned with the rest of its configuration and the same on every process; what changes at
run time (the incidents, who acknowledged them) is in the ledger (``ledger.models.Alert``).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from ledger.teams import is_team

__all__ = [
    "KINDS",
    "RECEIVER_TYPES",
    "Finding",
    "Receiver",
    "Rule",
    "parse_receivers",
    "parse_rules",
]

#: What a rule watches, and the threshold fields each kind needs.
KINDS: dict[str, tuple[str, ...]] = {
    "blocked_longer": ("minutes",),  # a run needing attention longer than N minutes
    "blocked_rate": ("percent", "minutes"),  # of the runs that stopped in M min, X % blocked
    "gate_waiting": ("minutes",),  # an approval gate waiting longer than N minutes
    "recovery_lagging": ("seconds",),  # the sweep silent, or an expired lease left, N s
}
PER = {"blocked_longer": ("", "agent", "team"), "blocked_rate": ("", "agent", "team"),
       "gate_waiting": ("", "agent", "tool", "team"), "recovery_lagging": ("",)}  # fmt: skip
SEVERITIES = ("critical", "error", "warning", "info")
RECEIVER_TYPES = ("pagerduty", "opsgenie", "slack", "webhook")
_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,39}$")
PAGERDUTY_URL = "https://events.pagerduty.com/v2/enqueue"
OPSGENIE_URL = "https://api.opsgenie.com"


@dataclass(frozen=True)
class Rule:
    name: str
    kind: str
    minutes: float = 0.0
    seconds: float = 0.0
    percent: float = 0.0
    min_runs: int = 10  # blocked_rate: fewer stopped runs in the window say nothing
    per: str = ""
    to: tuple[str, ...] = ()
    severity: str = "error"
    #: The teams whose runs it watches (``ledger.teams``); empty: every team's.
    teams: tuple[str, ...] = ()

    def teams_of(self, scope: str) -> tuple[str, ...] | None:
        """The teams whose runs an incident of this rule in ``scope`` covers; None: any team's
        (a person of one team does not see it, an every-team role does)."""
        if self.per == "team":
            return (scope,)
        return self.teams or None

    def describe(self) -> str:
        """The condition in words."""
        if self.kind == "blocked_longer":
            return f"a run needs attention longer than {self.minutes:g} min"
        if self.kind == "blocked_rate":
            return (
                f"over {self.percent:g} % of the runs that stopped in {self.minutes:g} min need "
                f"attention (at least {self.min_runs} runs)"
            )
        if self.kind == "gate_waiting":
            return f"an approval gate waits longer than {self.minutes:g} min"
        return (
            f"recovery lags more than {self.seconds:g} s (the sweep silent, or a dead lease left)"
        )


@dataclass(frozen=True)
class Finding:
    """What a rule's condition found in one scope: the words, and the facts (``count``,
    ``run_ids`` …) its incident keeps in ``detail``."""

    summary: str
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Receiver:
    name: str
    type: str
    url: str = ""
    routing_key: str = ""  # pagerduty
    api_key: str = ""  # opsgenie
    secret: str = ""  # webhook (whsec_…)
    #: pagerduty/opsgenie: the secret their webhooks back to us carry (an acknowledgement made
    #: in the pager acknowledges the incident here: ``runs.operations.alert_inbound``).
    inbound_secret: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


def _load(text: str, what: str) -> Any:
    text = (text or "").strip()
    if not text:
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{what} is not JSON: {exc}") from None


def parse_receivers(text: str) -> dict[str, Receiver]:
    """``RUNLEDGER_ALERT_RECEIVERS``; ``ValueError`` saying what is wrong."""
    data = _load(text, "RUNLEDGER_ALERT_RECEIVERS")
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ValueError("RUNLEDGER_ALERT_RECEIVERS must be a JSON object: name → receiver")
    out: dict[str, Receiver] = {}
    for name, spec in data.items():
        where = f"RUNLEDGER_ALERT_RECEIVERS[{name!r}]"
        if not isinstance(name, str) or not _NAME.match(name):
            raise ValueError(f"{where}: a name is 1-40 of a-z, 0-9, '_', '.', '-'")
        if not isinstance(spec, dict) or spec.get("type") not in RECEIVER_TYPES:
            raise ValueError(f"{where}: 'type' must be one of {', '.join(RECEIVER_TYPES)}")
        kind = spec["type"]
        url = str(spec.get("url") or "")
        url = url or {"pagerduty": PAGERDUTY_URL, "opsgenie": OPSGENIE_URL}.get(kind, "")
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"{where}: 'url' must be an http(s) URL")
        need = {"pagerduty": "routing_key", "opsgenie": "api_key", "webhook": "secret"}.get(kind)
        if need and not str(spec.get(need) or ""):
            raise ValueError(f"{where}: a {kind} receiver needs {need!r}")
        if kind == "webhook" and not str(spec["secret"]).startswith("whsec_"):
            raise ValueError(f"{where}: 'secret' is a Standard Webhooks secret (whsec_…)")
        inbound = spec.get("inbound_secret") or ""
        if inbound and (kind not in ("pagerduty", "opsgenie") or not isinstance(inbound, str)):
            raise ValueError(
                f"{where}: 'inbound_secret' is for pagerduty and opsgenie receivers (the secret "
                "of their webhooks back to runledger), a string"
            )
        if inbound and len(inbound) < 16:
            raise ValueError(f"{where}: 'inbound_secret' must be at least 16 characters")
        out[name] = Receiver(
            name=name,
            inbound_secret=str(inbound),
            type=kind,
            url=url,
            routing_key=str(spec.get("routing_key") or ""),
            api_key=str(spec.get("api_key") or ""),
            secret=str(spec.get("secret") or ""),
        )
    return out


def parse_rules(text: str, receivers: dict[str, Receiver]) -> list[Rule]:
    """``RUNLEDGER_ALERT_RULES`` against the receivers; ``ValueError`` saying what is wrong."""
    data = _load(text, "RUNLEDGER_ALERT_RULES")
    if data is None:
        return []
    if not isinstance(data, list):
        raise ValueError("RUNLEDGER_ALERT_RULES must be a JSON list of rules")
    rules: list[Rule] = []
    for i, spec in enumerate(data):
        rules.append(_rule(spec, f"RUNLEDGER_ALERT_RULES[{i}]", receivers))
    names = [r.name for r in rules]
    if len(set(names)) != len(names):
        raise ValueError("RUNLEDGER_ALERT_RULES: two rules have the same name")
    return rules


def _number(spec: dict[str, Any], key: str, where: str) -> float:
    value = spec.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 10**7:
        raise ValueError(f"{where}: {key!r} must be a positive number")
    return float(value)


def _rule(spec: Any, where: str, receivers: dict[str, Receiver]) -> Rule:
    if not isinstance(spec, dict):
        raise ValueError(f"{where}: a rule is a JSON object")
    name, kind = spec.get("name"), spec.get("kind")
    if not isinstance(name, str) or not _NAME.match(name):
        raise ValueError(f"{where}: 'name' is 1-40 of a-z, 0-9, '_', '.', '-'")
    if kind not in KINDS:
        raise ValueError(f"{where}: 'kind' must be one of {', '.join(KINDS)}")
    fields = {"name", "kind", "per", "to", "severity", "min_runs", "teams", *KINDS[kind]}
    unknown = set(spec) - fields
    if unknown:
        raise ValueError(f"{where}: unknown field(s) {', '.join(sorted(unknown))}")
    values = {key: _number(spec, key, where) for key in KINDS[kind]}
    if "percent" in values and values["percent"] > 100:
        raise ValueError(f"{where}: 'percent' is at most 100")
    per = spec.get("per", "")
    if per not in PER[kind]:
        raise ValueError(f"{where}: 'per' of a {kind} rule is one of {PER[kind]}")
    to = spec.get("to", list(receivers))
    if not isinstance(to, list) or any(t not in receivers for t in to):
        raise ValueError(f"{where}: 'to' lists receivers of RUNLEDGER_ALERT_RECEIVERS")
    severity = spec.get("severity", "error")
    if severity not in SEVERITIES:
        raise ValueError(f"{where}: 'severity' is one of {', '.join(SEVERITIES)}")
    min_runs = spec.get("min_runs", 10)
    if isinstance(min_runs, bool) or not isinstance(min_runs, int) or min_runs < 1:
        raise ValueError(f"{where}: 'min_runs' is a whole number, 1 or more")
    teams = spec.get("teams", [])
    if not isinstance(teams, list) or not all(is_team(t) for t in teams):
        raise ValueError(f"{where}: 'teams' is a list of teams (a-z 0-9 _ -, up to 63)")
    if teams and kind == "recovery_lagging":
        raise ValueError(f"{where}: a recovery_lagging rule watches the fleet, not teams")
    return Rule(name=name, kind=kind, per=per, to=tuple(to), severity=severity,
                min_runs=min_runs, teams=tuple(teams), **values)  # fmt: skip
