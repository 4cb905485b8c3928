"""The operator forms: every field checked on the server, every form carrying the version the
person saw (``seen_version``), so an action on a row that moved since is refused, not applied."""

from __future__ import annotations

from datetime import datetime, time, timedelta
from typing import Any

from django import forms
from django.utils import timezone

from ledger import selectors, transitions
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


class VersionedForm(forms.Form):
    seen_version = forms.IntegerField(min_value=1, widget=forms.HiddenInput)


class SettleForm(VersionedForm):
    """How a started effect ended. ``result`` (JSON text) is parsed for "it happened" only."""

    outcome = forms.ChoiceField(choices=SettlementOutcome.choices, widget=forms.RadioSelect)
    result = forms.CharField(
        required=False,
        strip=False,
        widget=forms.Textarea(attrs={"rows": 6, "spellcheck": "false", "class": "mono"}),
        help_text="For “it happened”: the downstream system's result, as JSON "
        '(e.g. {"gateway_ref": "gw_…", "amount_cents": 900}).',
    )
    reason = _reason()

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


class CleanRunForm(VersionedForm):
    """Start a clean run replacing this one; ``seen_version`` is the run's version."""

    reason = _reason()


class ForkForm(forms.Form):
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
            if not run_id or not version.isdigit() or len(run_id) > 64 or "\x00" in run_id:
                self.target_errors.append(f"ignored a damaged target {str(raw)[:80]!r}")
                continue
            out[run_id] = int(version)
        return out


ACTION_CHOICES = [("", "any action"), *[(v, v.replace("_", " ")) for v in AuditAction.values]]


class AuditFilterForm(forms.Form):
    run = forms.CharField(max_length=64, required=False, strip=True, label="run id")
    actor = forms.CharField(max_length=150, required=False, strip=True)
    action = forms.ChoiceField(choices=ACTION_CHOICES, required=False)
    since = forms.DateField(required=False, label="from", help_text="YYYY-MM-DD")
    until = forms.DateField(required=False, label="to (inclusive)", help_text="YYYY-MM-DD")
    before = forms.CharField(max_length=200, required=False)

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


def encode_audit_cursor(at: datetime, pk: int) -> str:
    """The audit page's keyset cursor: the runs list's ``Cursor`` encoding, the pk as its key."""
    return Cursor(at=at, run_id=str(pk)).encode()


def decode_audit_cursor(text: str) -> tuple[datetime, int]:
    """Raises ValueError for anything that is not a cursor ``encode_audit_cursor`` wrote."""
    try:
        cursor = Cursor.decode(text)
        return cursor.at, int(cursor.run_id)
    except ValueError:
        raise ValueError("not an audit cursor") from None
