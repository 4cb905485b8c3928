"""The operator forms: every field checked on the server, every form carrying the version the
person saw (``seen_version``), so an action on a row that moved since is refused, not applied."""

from __future__ import annotations

from datetime import date, datetime, time, timedelta
from typing import Any

from django import forms
from django.utils import timezone

from ledger import selectors, transitions
from ledger.errors import InvalidInput
from ledger.inputs import parse_whole_number, queryable
from ledger.models import AuditAction, SettlementOutcome
from ledger.selectors import Cursor

# ledger.transitions refuses longer reasons; the form says so first.
from ledger.transitions import MAX_REASON_CHARS

REASON_HELP = "Required. Say why: it is recorded in the audit with your name."


def _reason(required: bool = True) -> forms.CharField:
    return forms.CharField(
        max_length=MAX_REASON_CHARS,
        required=required,
        strip=True,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text=REASON_HELP if required else "Optional; recorded in the audit.",
    )


#: The largest row version (a 32-bit integer column): a bigger one is a damaged form.
MAX_VERSION = 2**31 - 1
#: The dates the audit filter takes: the ends of the calendar have no bounds in UTC.
FIRST_DAY, LAST_DAY = date(1900, 1, 1), date(9999, 12, 30)


class VersionedForm(forms.Form):
    seen_version = forms.IntegerField(min_value=1, max_value=MAX_VERSION, widget=forms.HiddenInput)


class SettleForm(VersionedForm):
    """How a started effect ended. ``result`` (JSON text) is parsed for "it happened" only."""

    outcome = forms.ChoiceField(choices=SettlementOutcome.choices, widget=forms.RadioSelect)
    result = forms.CharField(
        required=False,
        strip=False,
        widget=forms.Textarea(attrs={"rows": 6, "spellcheck": "false", "class": "mono"}),
        help_text="For “it happened”: the downstream system's result, as JSON "
        "(what it recorded: its reference, the amount and the customer it names).",
    )
    reason = _reason()
    acknowledge = forms.BooleanField(
        required=False,
        help_text="The result disagrees with the step's inputs or the lookup's answer, and "
        "the person checked it and proposes it anyway.",
    )

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if data.get("outcome") == SettlementOutcome.HAPPENED:
            try:
                data["parsed_result"] = transitions.parse_result_text(data.get("result", ""))
            except transitions.InvalidInput as exc:
                self.add_error("result", str(exc))
        else:
            if (data.get("result") or "").strip():
                self.add_error("result", "only “it happened” carries a result; leave it empty")
            data["parsed_result"] = None
        return data


class DecideForm(forms.Form):
    """Approve (reason optional) or reject (reason required) a waiting proposal."""

    reason = _reason(required=False)
    #: Ticked by an approver who read the warnings that the value disagrees with its evidence
    #: (required then: the views refuse an approval of a flagged value without it).
    acknowledge = forms.BooleanField(required=False)


class RejectForm(forms.Form):
    reason = _reason()


class StaleForm(VersionedForm):
    reason = _reason()


class RunActionForm(VersionedForm):
    """Resume, retry or cancel a run; ``seen_version`` is the run's version."""

    reason = _reason()
    max_resumes = forms.IntegerField(
        required=False,
        min_value=0,
        max_value=100_000,
        help_text="Optional: raise the resume budget (never lowered).",
    )
    anyway = forms.BooleanField(
        required=False, help_text="Resume even though the preview says it stops again at once."
    )


def resend_phrase(count: int) -> str:
    """What a person types to confirm that a new run sends ``count`` effects again."""
    return f"send {count} again"


class ResendConfirmation(forms.Form):
    """The number of effects the page listed as sent again (``resend_count``) and the typed
    confirmation, required when there is any: ``confirmed()`` is what the transition gets."""

    resend_count = forms.IntegerField(required=False, min_value=0, max_value=1_000_000)
    confirm = forms.CharField(
        required=False,
        max_length=40,
        strip=True,
        label="Type the confirmation",
        help_text="The effects listed above are sent again under new keys.",
    )

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        count = data.get("resend_count") or 0
        typed = " ".join(str(data.get("confirm") or "").lower().split())
        if count and typed != resend_phrase(count):
            self.add_error(
                "confirm",
                f'Type "{resend_phrase(count)}" to confirm that the new run sends the '
                f"{count} effect{'s' if count != 1 else ''} listed again.",
            )
        return data

    def confirmed(self) -> int | None:
        """The number confirmed, or None when the page listed none."""
        return self.cleaned_data.get("resend_count") or None


class CleanRunForm(VersionedForm, ResendConfirmation):
    """Start a clean run replacing this one; ``seen_version`` is the run's version."""

    reason = _reason()


class ForkForm(ResendConfirmation):
    step_id = forms.CharField(max_length=255, strip=True, label="Fork after step")
    reason = _reason()


class BulkApplyForm(forms.Form):
    """The runs and versions the preview showed, the action and the reason."""

    action = forms.ChoiceField(choices=[(a, a) for a in selectors.BULK_ACTIONS])
    reason = _reason()
    max_resumes = forms.IntegerField(required=False, min_value=0, max_value=100_000)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.target_errors: list[str] = []

    def targets(self) -> dict[str, int]:
        """run id → version from the hidden ``target`` fields ("run_id:version")."""
        out: dict[str, int] = {}
        for raw in self.data.getlist("target") if hasattr(self.data, "getlist") else []:
            run_id, _, version = str(raw).rpartition(":")
            try:
                number = parse_whole_number(version, what="version", lo=1, hi=MAX_VERSION)
            except InvalidInput:
                number = None
            if number is None or not run_id or len(run_id) > 64 or not queryable(run_id):
                self.target_errors.append(f"ignored a damaged target {str(raw)[:80]!r}")
                continue
            out[run_id] = number
        return out


ACTION_CHOICES = [("", "any action"), *[(v, v.replace("_", " ")) for v in AuditAction.values]]


class AuditFilterForm(forms.Form):
    run = forms.CharField(
        max_length=200,
        required=False,
        strip=True,
        label="run",
        help_text="a run id, part of one, or words of its title",
    )
    actor = forms.CharField(max_length=150, required=False, strip=True)
    action = forms.ChoiceField(choices=ACTION_CHOICES, required=False)
    since = forms.DateField(required=False, label="from", help_text="YYYY-MM-DD")
    until = forms.DateField(required=False, label="to (inclusive)", help_text="YYYY-MM-DD")
    before = forms.CharField(max_length=200, required=False)

    def clean_since(self) -> date | None:
        return _in_calendar(self.cleaned_data.get("since"))

    def clean_until(self) -> date | None:
        return _in_calendar(self.cleaned_data.get("until"))

    def clean_before(self) -> tuple[datetime, int] | None:
        text = self.cleaned_data.get("before", "")
        if not text:
            return None
        try:
            return decode_audit_cursor(text)
        except ValueError:
            raise forms.ValidationError("this page link is damaged; showing the newest") from None

    def bounds(self) -> tuple[datetime | None, datetime | None]:
        """[since, until) as aware datetimes: whole days, ``until`` inclusive."""
        data = self.cleaned_data
        tz = timezone.get_current_timezone()
        since = datetime.combine(data["since"], time.min, tz) if data.get("since") else None
        until = None
        if data.get("until"):
            until = datetime.combine(data["until"] + timedelta(days=1), time.min, tz)
        return since, until

    def problems(self) -> list[str]:
        return [
            f"Ignored {self.fields[name].label or name}: {error}"
            for name, errors in self.errors.items()
            for error in errors
        ]


def _in_calendar(day: date | None) -> date | None:
    if day is not None and not FIRST_DAY <= day <= LAST_DAY:
        raise forms.ValidationError(f"choose a date from {FIRST_DAY} to {LAST_DAY}")
    return day


def encode_audit_cursor(at: datetime, pk: int) -> str:
    """The audit page's keyset cursor: the runs list's ``Cursor`` encoding, the pk as its key."""
    return Cursor(at=at, run_id=str(pk)).encode()


def decode_audit_cursor(text: str) -> tuple[datetime, int]:
    """Raises ValueError for anything that is not a cursor ``encode_audit_cursor`` wrote."""
    try:
        cursor = Cursor.decode(text)
        return cursor.at, parse_whole_number(cursor.run_id, what="an audit event id")
    except ValueError:
        raise ValueError("not an audit cursor") from None


class PauseForm(forms.Form):
    """Pause a tool (in every agent), an agent or a run."""

    scope = forms.ChoiceField(choices=[("tool", "tool"), ("agent", "agent"), ("run", "run")])
    target = forms.CharField(max_length=200, help_text="The tool's or agent's name, or a run id.")
    reason = _reason()
    expires_in = forms.TypedChoiceField(
        label="Lift by itself",
        choices=[
            ("", "never (a person lifts it)"),
            ("15", "in 15 min"),
            ("60", "in 1 hour"),
            ("240", "in 4 hours"),
            ("1440", "in 24 hours"),
        ],
        coerce=int,
        empty_value=None,
        required=False,
        help_text="The sweep lifts the pause then (queuing what it holds), audited.",
    )

    def expires_at(self, now: datetime) -> datetime | None:
        minutes = self.cleaned_data.get("expires_in")
        return now + timedelta(minutes=minutes) if minutes else None


class LiftForm(forms.Form):
    """Lift a pause; ``expected`` is the count of held runs the page showed."""

    expected = forms.IntegerField(min_value=0, widget=forms.HiddenInput)
    reason = _reason()
