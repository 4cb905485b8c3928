"""The runs list's filter: every value is checked; a bad one is dropped with a message."""

from __future__ import annotations

import re
from datetime import timedelta
from urllib.parse import urlencode

from django import forms

from ledger.models import Reason, RunStatus
from ledger.selectors import LEASE_EXPIRED, Cursor, RunFilter

_AGE = re.compile(r"^\s*(\d{1,9})\s*([smhd])\s*$")
_MAX_AGE = timedelta(days=3650)
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}

STATUS_CHOICES = [
    ("", "any status"),
    *RunStatus.choices,
    (LEASE_EXPIRED, "running, lease expired"),
]
REASON_CHOICES = [("", "any reason"), *[(v, v) for v in Reason.values if v]]
ORDER_CHOICES = [("newest", "newest first"), ("oldest", "oldest in state first")]
TAKEN_CHOICES = [("", "anyone or nobody"), ("mine", "mine"), ("nobody", "nobody's")]


def parse_age(text: str) -> timedelta:
    """'90s', '30m', '2h', '7d' → a timedelta; ValueError otherwise."""
    match = _AGE.match(text)
    if match is None:
        raise ValueError(text)
    return timedelta(**{_UNITS[match.group(2)]: int(match.group(1))})


class RunFilterForm(forms.Form):
    status = forms.ChoiceField(choices=STATUS_CHOICES, required=False)
    reason = forms.ChoiceField(choices=REASON_CHOICES, required=False)
    agent = forms.CharField(max_length=200, required=False, strip=True)
    age = forms.CharField(
        max_length=20, required=False, strip=True, help_text="in state for at least: 30m, 2h, 1d"
    )
    q = forms.CharField(
        max_length=200,
        required=False,
        strip=True,
        label="search",
        help_text="a title's words, a label as key:value, or a run id prefix (run_…)",
    )
    order = forms.ChoiceField(choices=ORDER_CHOICES, required=False)
    taken = forms.ChoiceField(choices=TAKEN_CHOICES, required=False, label="on it")
    # The runs a schedule started (``?schedule=sch_…``: the Schedules page links here).
    schedule = forms.RegexField(regex=r"^sch_[0-9a-f]{1,60}$", required=False, max_length=64)
    # One team's runs (``?team=payments``), among those the reader may see.
    team = forms.RegexField(regex=r"^[a-z0-9][a-z0-9_-]{0,62}$", required=False, max_length=63)
    after = forms.CharField(max_length=400, required=False)

    def clean_age(self) -> timedelta | None:
        text = self.cleaned_data.get("age", "")
        if not text:
            return None
        try:
            age = parse_age(text)
        except ValueError:
            raise forms.ValidationError(
                "write a number and a unit (s, m, h or d), e.g. 30m or 2d"
            ) from None
        if age > _MAX_AGE:
            raise forms.ValidationError("at most 3650d")
        return age

    def clean_after(self) -> Cursor | None:
        text = self.cleaned_data.get("after", "")
        if not text:
            return None
        try:
            return Cursor.decode(text)
        except ValueError:
            raise forms.ValidationError(
                "this page link is damaged; showing the first page"
            ) from None

    def run_filter(self, taker: str = "", *, teams: frozenset[str] | None) -> RunFilter:
        """The filter made of the values that are valid (call after is_valid()); ``taker`` is
        the reader, whom "mine" means; ``teams`` the teams they may see (None: every team —
        say it: the scope is never left out by accident)."""
        data = self.cleaned_data
        status, reason, order = data.get("status", ""), data.get("reason", ""), data.get("order")
        if reason and not status:
            status = RunStatus.NEEDS_ATTENTION  # reasons are what needs_attention runs carry
        if order == "oldest" and not status:
            status = RunStatus.NEEDS_ATTENTION  # "oldest first" is the oldest-blocked first
        return RunFilter(
            status=status,
            reason=reason,
            agent=data.get("agent", ""),
            older_than=data.get("age"),
            search=data.get("q", ""),
            order=order or "newest",
            taken=data.get("taken", ""),
            taker=taker,
            schedule=data.get("schedule", ""),
            team=data.get("team", ""),
            teams=teams,
        )

    def cursor(self) -> Cursor | None:
        return self.cleaned_data.get("after")

    def problems(self) -> list[str]:
        """One sentence per dropped value, naming the field and what was wrong."""
        out = []
        for name, errors in self.errors.items():
            label = self.fields[name].label or name
            value = self.data.get(name, "")
            for error in errors:
                out.append(f"Ignored {label} {value[:80]!r}: {error}")
        return out


def filter_query(flt: RunFilter, age_text: str = "") -> dict[str, str]:
    """The query parameters that reproduce a filter (for links and the refresh URL)."""
    params = {
        "status": flt.status,
        "reason": flt.reason,
        "agent": flt.agent,
        "age": age_text if flt.older_than is not None else "",
        "q": flt.search,
        "order": flt.order if flt.order != "newest" else "",
        "taken": flt.taken,
        "schedule": flt.schedule,
        "team": flt.team,
    }
    return {k: v for k, v in params.items() if v}


def encode_query(params: dict[str, str]) -> str:
    return urlencode(params)
