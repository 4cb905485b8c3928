"""The Django admin for the ledger: runs, steps, settlements and the audit.

Everything is searchable and filterable, JSON is shown indented, the worker lease is visible.
Superusers may edit a few fields of runs and steps; every edit needs a reason and goes through
``ledger.transitions`` (version check, audit row with before/after), never ``obj.save()``.
Nothing can be added or deleted here; settlements and audit events are read-only. Webhook
subscriptions are the exception: a superuser adds one (through ``ledger.events.subscribe``, its
secret shown once) or removes some, never edits one.
"""

from __future__ import annotations

import json
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.widgets import AdminSplitDateTime
from django.core.exceptions import ValidationError
from django.db.models import Model, QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString

from ledger import transitions
from ledger.errors import InvalidInput, OperationError
from ledger.inputs import parse_json_text
from ledger.models import AuditEvent, Execution, Pause, Run, Settlement, Step, WebhookSubscription
from ledger.teams import admin_reader_teams
from ledger.transitions import events as subscription_events
from ledger.webhooks import EVENT_TYPES


def pretty(value: Any) -> SafeString:
    """JSON, indented, escaped, in a scrollable block."""
    if value is None:
        return format_html("<code>null</code>")
    text = json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)
    return format_html(
        # tabindex: a block that scrolls is reached by keyboard too (axe's scrollable-region).
        '<pre tabindex="0" style="max-height:24em;overflow:auto;white-space:pre-wrap">{}</pre>',
        text,
    )


class PrettyJSONField(forms.JSONField):
    """Edits JSON as indented text. Parsed with ``ledger.inputs.parse_json_text``: too deep,
    too long a number, NaN, a NUL byte or a lone surrogate is a form error, never a 500."""

    def to_python(self, value: Any) -> Any:
        if self.disabled:
            return value
        if value in self.empty_values:
            return None
        if isinstance(value, list | dict | int | float):
            return value
        try:
            return parse_json_text(str(value), what="the value")
        except InvalidInput as exc:
            raise ValidationError(str(exc), code="invalid") from None

    def bound_data(self, data: Any, initial: Any) -> Any:
        if self.disabled:
            return initial
        if data is None:
            return None
        try:
            return parse_json_text(str(data), what="the value")
        except InvalidInput:
            return forms.fields.InvalidJSONInput(data)

    def prepare_value(self, value: Any) -> Any:
        if isinstance(value, forms.fields.InvalidJSONInput):
            return value
        return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)


class LedgerEditForm(forms.ModelForm):
    """An admin edit: the changed fields, the version the admin saw, and why."""

    change_reason = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text="Required. Recorded in the audit with the values before and after.",
    )
    seen_version = forms.IntegerField(min_value=1, max_value=2**31 - 1, widget=forms.HiddenInput)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk is not None:
            self.fields["seen_version"].initial = self.instance.version
        for name, field in self.fields.items():
            if isinstance(field, forms.JSONField) and not isinstance(field, PrettyJSONField):
                self.fields[name] = PrettyJSONField(
                    required=False, widget=forms.Textarea(attrs={"rows": 8, "cols": 80})
                )


class StepForm(LedgerEditForm):
    class Meta:
        model = Step
        fields = list(transitions.STEP_EDITABLE)


class RunForm(LedgerEditForm):
    class Meta:
        model = Run
        fields = list(transitions.RUN_EDITABLE)


class LabelledSplitDateTime(AdminSplitDateTime):
    """Django's date and time boxes, each named for a screen reader ("expires at (date)"):
    the admin's own template labels neither (axe: two critical ``label`` findings a field)."""

    def __init__(self, label: str) -> None:
        super().__init__()
        self.label = label

    def get_context(self, name: str, value: Any, attrs: Any) -> dict[str, Any]:
        context = super().get_context(name, value, attrs)
        for sub, part in zip(context["widget"]["subwidgets"], ("date", "time"), strict=False):
            sub["attrs"]["aria-label"] = f"{self.label} ({part})"
        return context


class LineageFilter(admin.SimpleListFilter):
    """Runs by lineage, every choice named (Django's own filter over the column offers the
    empty value as a link with no text)."""

    title = "lineage"
    parameter_name = "lineage"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("none", "no parent"), ("fork", "a fork"), ("continue", "a continuation")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        if value is None:
            return queryset
        return queryset.filter(parent_kind="" if value == "none" else value)


Sections = tuple[tuple[str | None, tuple[str, ...]], ...]
EDIT_FIELDS = ("change_reason", "seen_version")


class TeamScoped(admin.ModelAdmin):
    """A staff member who is not a superuser and holds team roles (``runs.dashboard.teams``)
    sees the rows of the runs of those teams only, in the list and behind every change page (a
    row of another team is the admin's missing row). A role group holds in every team; staff
    without any team role keep what their admin permissions give them, as before teams.

    ``team_field``: the path to the run's team ("team", "run__team"), "run_id" for a row that
    names its run by id, or None for a row of no one team (shown to every-team roles only).
    """

    team_field: str | None = "run__team"

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        return _scoped(request, super().get_queryset(request), self.team_field)


def _scoped(request: HttpRequest, qs: QuerySet[Any], field: str | None) -> QuerySet[Any]:
    user = request.user
    if getattr(user, "is_superuser", False):
        return qs
    # The web project's rule (runs.dashboard.teams.admin_reader), installed at start-up.
    teams = admin_reader_teams(user)
    if teams is None:
        return qs
    if field is None or not teams:
        return qs.none()
    if field == "run_id":
        return qs.filter(run_id__in=Run.objects.filter(team__in=list(teams)).values("run_id"))
    return qs.filter(**{f"{field}__in": list(teams)})


class LedgerAdmin(TeamScoped):
    """Shared rules: no add, no delete, edits by superusers only, through ledger.transitions.

    ``sections`` name model fields; a JSON field is shown indented (``<name>_pretty``) unless
    the user may edit it. A superuser also gets the reason and version fields of the edit form.
    """

    editable: tuple[str, ...] = ()
    json_fields: tuple[str, ...] = ()
    sections: Sections = ()
    show_full_result_count = False  # no COUNT(*) over a large ledger on every page

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def formfield_for_dbfield(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        field = super().formfield_for_dbfield(db_field, request, **kwargs)
        if field is not None and isinstance(field.widget, AdminSplitDateTime):
            field.widget = LabelledSplitDateTime(str(db_field.verbose_name))
        return field

    def has_delete_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return bool(getattr(request.user, "is_superuser", False))

    def get_fieldsets(self, request: HttpRequest, obj: Model | None = None) -> Any:
        can_edit = self.has_change_permission(request, obj)
        out: list[tuple[str | None, dict[str, Any]]] = []
        for title, names in self.sections:
            shown = [self._shown(name, can_edit) for name in names]
            out.append((title, {"fields": shown}))
            if title is None and can_edit:
                out.append(("Edit (audited)", {"fields": EDIT_FIELDS}))
        return out

    def _shown(self, name: str, can_edit: bool) -> str:
        if can_edit and name in self.editable:
            return name
        return f"{name}_pretty" if name in self.json_fields else name

    def get_readonly_fields(self, request: HttpRequest, obj: Model | None = None) -> list[str]:
        can_edit = self.has_change_permission(request, obj)
        names = [self._shown(n, can_edit) for _, section in self.sections for n in section]
        return [n for n in names if not (can_edit and n in self.editable)]

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        changes = {k: form.cleaned_data[k] for k in form.changed_data if k in self.editable}
        if not changes:
            messages.info(request, "Nothing changed, so nothing was recorded.")
            return
        try:
            self.edit(request, obj, changes, form.cleaned_data)
        except OperationError as exc:
            request._ledger_refused = True  # type: ignore[attr-defined]
            messages.error(request, f"Not saved: {exc}")

    def edit(self, request: HttpRequest, obj: Any, changes: dict[str, Any], data: Any) -> None:
        raise NotImplementedError

    def log_change(self, request: HttpRequest, obj: Any, message: Any) -> Any:
        # The ledger's audit is the record; skip Django's LogEntry when the edit was refused.
        if getattr(request, "_ledger_refused", False):
            return None
        return super().log_change(request, obj, message)

    def response_change(self, request: HttpRequest, obj: Any) -> HttpResponse:
        if getattr(request, "_ledger_refused", False):
            return HttpResponseRedirect(request.path)
        return super().response_change(request, obj)


@admin.register(Run)
class RunAdmin(LedgerAdmin):
    team_field = "team"
    form = RunForm
    editable = transitions.RUN_EDITABLE
    json_fields = ("inputs", "result")
    list_display = (
        "run_id",
        "title",
        "agent",
        "status",
        "reason",
        "blocked_step_id",
        "resumes",
        "lease_owner",
        "lease_expires_at",
        "status_changed_at",
    )
    list_filter = ("status", "reason", "agent", LineageFilter)
    search_fields = ("=run_id", "title", "agent", "blocked_step_id", "lease_owner")
    date_hierarchy = "created_at"
    ordering = ("-created_at",)
    sections = (
        (None, ("run_id", "agent", "status", "reason", "blocked_step_id", "detail")),
        ("Data", ("inputs", "result", "error", "steps_link")),
        ("Budget", ("resume_count", "max_resumes", "executions")),
        (
            "Worker lease",
            (
                "lease_owner",
                "lease_token",
                "lease_expires_at",
                "heartbeat_at",
                "prior_lease_expires_at",
            ),
        ),
        (
            "Determinism record and lineage",
            (
                "plan_version",
                "tool_schema_hash",
                "code_version",
                "parent",
                "parent_kind",
                "forked_from_step_id",
            ),
        ),
        (
            "Times",
            (
                "created_at",
                "updated_at",
                "status_changed_at",
                "started_at",
                "finished_at",
                "version",
            ),
        ),
    )

    @admin.display(description="resumes")
    def resumes(self, run: Run) -> str:
        return f"{run.resume_count} / {run.max_resumes}"

    @admin.display(description="steps")
    def steps_link(self, run: Run) -> SafeString:
        url = reverse("admin:ledger_step_changelist") + f"?run__run_id__exact={run.run_id}"
        return format_html('<a href="{}">the ledger rows of {}</a>', url, run.run_id)

    @admin.display(description="inputs")
    def inputs_pretty(self, run: Run) -> SafeString:
        return pretty(run.inputs)

    @admin.display(description="result")
    def result_pretty(self, run: Run) -> SafeString:
        return pretty(run.result)

    def edit(self, request: HttpRequest, obj: Any, changes: dict[str, Any], data: Any) -> None:
        transitions.run_admin_edit(
            run=obj,
            by=request.user,
            reason=data["change_reason"],
            changes=changes,
            seen_version=data["seen_version"],
        )


@admin.register(Step)
class StepAdmin(LedgerAdmin):
    form = StepForm
    editable = transitions.STEP_EDITABLE
    json_fields = ("result", "inputs", "errors")
    list_display = (
        "step_id",
        "run",
        "seq",
        "kind",
        "tool",
        "status",
        "attempt",
        "effect_key",
        "settled_by",
        "updated_at",
    )
    list_filter = ("status", "kind")
    list_select_related = ("run",)
    search_fields = ("=run__run_id", "step_id", "effect_key", "tool")
    ordering = ("run", "seq")
    sections = (
        (None, ("run", "step_id", "seq", "kind", "tool", "status", "settled_by")),
        ("Result", ("result", "next_step_id", "attempt", "effect_key", "error", "errors")),
        ("Inputs", ("input_hash", "inputs", "inputs_truncated", "model_id", "prompt_hash")),
        ("Model usage", ("tokens_in", "tokens_out", "cost_usd")),
        ("Run's worker lease", ("run_lease",)),
        ("Times", ("started_at", "finished_at", "expires_at", "updated_at", "version")),
    )

    def get_queryset(self, request: HttpRequest) -> QuerySet[Step]:
        return super().get_queryset(request).select_related("run")

    @admin.display(description="result")
    def result_pretty(self, step: Step) -> SafeString:
        return pretty(step.result)

    @admin.display(description="inputs")
    def inputs_pretty(self, step: Step) -> SafeString:
        return pretty(step.inputs)

    @admin.display(description="errors (one per failed attempt)")
    def errors_pretty(self, step: Step) -> SafeString:
        return pretty(step.errors)

    @admin.display(description="lease")
    def run_lease(self, step: Step) -> str:
        run = step.run
        if not run.lease_token:
            return f"none (run {run.run_id} is {run.status})"
        expires = f"{run.lease_expires_at:%Y-%m-%d %H:%M:%S}" if run.lease_expires_at else "?"
        return f"held by {run.lease_owner} until {expires}"

    def edit(self, request: HttpRequest, obj: Any, changes: dict[str, Any], data: Any) -> None:
        transitions.step_admin_edit(
            step=obj,
            by=request.user,
            reason=data["change_reason"],
            changes=changes,
            seen_version=data["seen_version"],
        )


class ReadOnlyAdmin(TeamScoped):
    show_full_result_count = False

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False


@admin.register(Settlement)
class SettlementAdmin(ReadOnlyAdmin):
    list_display = (
        "id",
        "run",
        "step_id",
        "outcome",
        "status",
        "proposed_by_name",
        "decided_by_name",
        "created_at",
        "decided_at",
    )
    list_filter = ("status", "outcome", "approval_required")
    search_fields = (
        "=run__run_id",
        "step_id",
        "effect_key",
        "proposed_by_name",
        "decided_by_name",
    )
    list_select_related = ("run",)
    date_hierarchy = "created_at"
    fields = (
        "run",
        "step_row",
        "step_id",
        "effect_key",
        "outcome",
        "result_pretty",
        "reason",
        "status",
        "approval_required",
        "step_version",
        "proposed_by_name",
        "created_at",
        "decided_by_name",
        "decided_at",
        "decision_reason",
    )
    readonly_fields = fields

    @admin.display(description="result")
    def result_pretty(self, settlement: Settlement) -> SafeString:
        return pretty(settlement.result)


@admin.register(AuditEvent)
class AuditEventAdmin(ReadOnlyAdmin):
    team_field = "run_id"
    list_display = ("at", "actor", "action", "run_id", "step_id", "short_reason")
    list_filter = ("action", "actor")
    search_fields = ("=run_id", "step_id", "actor", "reason")
    date_hierarchy = "at"
    fields = (
        "at",
        "actor",
        "action",
        "run_id",
        "step_id",
        "reason",
        "before_pretty",
        "after_pretty",
        "settlement",
    )
    readonly_fields = fields

    def get_queryset(self, request: HttpRequest) -> QuerySet[AuditEvent]:
        return super().get_queryset(request).select_related("settlement")

    @admin.display(description="reason")
    def short_reason(self, event: AuditEvent) -> str:
        return event.reason if len(event.reason) <= 80 else event.reason[:79] + "…"

    @admin.display(description="before")
    def before_pretty(self, event: AuditEvent) -> SafeString:
        return pretty(event.before)

    @admin.display(description="after")
    def after_pretty(self, event: AuditEvent) -> SafeString:
        return pretty(event.after)


class WebhookSubscriptionForm(forms.ModelForm):
    """A new subscription, checked as ``ledger.events.subscribe`` checks it."""

    url = forms.CharField(max_length=2000, help_text="where events are POSTed (http or https)")
    events = forms.MultipleChoiceField(
        choices=[(e, e) for e in EVENT_TYPES],
        initial=list(EVENT_TYPES),
        widget=forms.CheckboxSelectMultiple,
    )

    class Meta:
        model = WebhookSubscription
        fields = ("url", "agent", "run_id", "events", "description")

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        try:
            data.update(
                subscription_events.check_subscription(
                    data.get("url"),
                    agent=data.get("agent"),
                    run_id=data.get("run_id"),
                    events=data.get("events"),
                    description=data.get("description") or "",
                )
            )
        except InvalidInput as exc:
            raise ValidationError(str(exc)) from None
        return data


@admin.register(WebhookSubscription)
class WebhookSubscriptionAdmin(TeamScoped):
    """Applications' subscriptions to completion events. A superuser adds one (its signing
    secret is shown once, in the message after saving) or removes some (an action); the secret
    is never shown again, and nothing is edited or deleted in place."""

    team_field = None
    form = WebhookSubscriptionForm
    list_display = ("id", "scope", "url", "event_list", "created_at", "created_by", "removed_at")
    list_filter = (("removed_at", admin.EmptyFieldListFilter), "agent")
    search_fields = ("url", "=agent", "=run_id", "description")
    actions = ("remove_subscriptions",)
    show_full_result_count = False
    shown = ("url", "agent", "run_id", "events", "description", "created_at", "created_by",
             "removed_at", "removed_by")  # fmt: skip

    def has_add_permission(self, request: HttpRequest) -> bool:
        return bool(getattr(request.user, "is_superuser", False))

    def has_change_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False

    def get_fields(self, request: HttpRequest, obj: Model | None = None) -> Any:
        return self.form.Meta.fields if obj is None else self.shown

    def get_readonly_fields(self, request: HttpRequest, obj: Model | None = None) -> Any:
        return () if obj is None else self.shown

    @admin.display(description="events")
    def event_list(self, s: WebhookSubscription) -> str:
        return ", ".join(s.events)

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        data = form.cleaned_data
        created, secret = subscription_events.subscribe(
            data["url"],
            agent=data["agent"] or None,
            run_id=data["run_id"] or None,
            events=data["events"],
            description=data["description"],
            by=request.user,
        )
        obj.pk, obj.secret, obj.created_at = created.pk, created.secret, created.created_at
        messages.warning(
            request,
            f"Subscription {created.pk}'s signing secret, shown once (give it to the "
            f"application to verify what it receives): {secret}",
        )

    @admin.action(description="Remove the selected subscriptions (no further events)")
    def remove_subscriptions(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        removed = 0
        for subscription in queryset.filter(removed_at__isnull=True):
            subscription_events.unsubscribe(subscription.pk, by=request.user)
            removed += 1
        messages.info(request, f"{removed} subscription(s) removed.")


@admin.register(Pause)
class PauseAdmin(ReadOnlyAdmin):
    """Read only: pauses are made and lifted on the Pauses page or by `pause`/`unpause`."""

    team_field = None

    list_display = ("id", "scope", "target", "created_by", "created_at", "lifted_at", "requeued")
    list_filter = ("scope",)
    search_fields = ("target", "reason", "created_by")


@admin.register(Execution)
class ExecutionAdmin(ReadOnlyAdmin):
    list_display = ("run", "number", "worker", "started_at", "ended_at", "ending")
    list_filter = ("ending",)
    search_fields = ("=run__run_id", "worker", "task_id")
    raw_id_fields = ("run",)
