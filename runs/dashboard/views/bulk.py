"""Bulk actions from the runs list: a selection (checkboxes) or the current filter, first a
preview of what will happen to each run (``ledger.processes.resume.bulk_preview``: the rows'
verdict and the dry replay's, writes nothing), then the
act on exactly the runs and versions the preview showed, with one outcome per run."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.contrib.auth.decorators import login_required, permission_required
from django.http import HttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from ledger import selectors, transitions
from ledger.errors import InvalidInput
from ledger.inputs import parse_whole_number
from ledger.models import Run
from ledger.processes import resume as resume_process
from ledger.selectors import BULK_LIMIT
from runs.dashboard.forms import RunFilterForm, encode_query, filter_query
from runs.dashboard.http import HtmxHttpRequest, seen_teams
from runs.dashboard.incidents import INCIDENT_WINDOW_MAX, incident_group_of
from runs.dashboard.models import OPERATE_RUNS
from runs.dashboard.operator_forms import BulkApplyForm
from runs.dashboard.teams import scope_runs


def _max_resumes(text: str) -> tuple[int | None, str]:
    text = (text or "").strip()
    if not text:
        return None, ""
    try:
        return parse_whole_number(text, what="the resume budget", hi=100_000), ""
    except InvalidInput as exc:
        return None, f"ignored the resume budget {text[:20]!r}: {exc}"


def _plan(request: HtmxHttpRequest, action: str, max_resumes: int | None) -> dict[str, Any]:
    """The preview of ``action`` on the selection, or on the list's current filter."""
    if request.GET.get("scope") == "filter":
        form = RunFilterForm(request.GET)
        form.is_valid()
        flt = form.run_filter(
            taker=request.user.get_username(), teams=seen_teams(request, OPERATE_RUNS)
        )
        query = filter_query(flt, age_text=str(request.GET.get("age", "")).strip())
        plan = _plan_filter(action, flt, max_resumes, timezone.now())
        return {"plan": plan, "scope": "filter", "filter_query": encode_query(query),
                "filter_words": _filter_words(query), "problems": form.problems()}  # fmt: skip
    if request.GET.get("scope") == "incident":
        return _plan_incident(request, action, max_resumes)
    # A NUL byte names no run (and PostgreSQL refuses it in a query): reported as missing.
    given = [r for r in request.GET.getlist("run") if r][: BULK_LIMIT + 1]
    # A run of a team the person may not act in is reported as missing (never touched).
    run_ids = _acting_on(request, [r for r in given if "\x00" not in r])
    if not run_ids:
        return {"plan": None, "scope": "selection", "problems": ["Select runs in the list first."]}
    plan = resume_process.bulk_preview(action=action, run_ids=run_ids, max_resumes=max_resumes)
    missing = sorted(set(given) - {i.run_id for i in plan.items})
    problems = [f"No run {r!r}." for r in missing[:20]]
    return {"plan": plan, "scope": "selection", "problems": problems}


def _plan_filter(
    action: str, flt: selectors.RunFilter, max_resumes: int | None, now: datetime
) -> selectors.BulkPlan:
    return resume_process.bulk_preview(action=action, flt=flt, now=now, max_resumes=max_resumes)


def _plan_incident(
    request: HtmxHttpRequest, action: str, max_resumes: int | None
) -> dict[str, Any]:
    """The runs of one group of the incidents page (``i_status``, ``i_agent``, ``i_step``,
    ``i_reason``, ``i_sig``: the group's cause), listed now: the act applies to exactly these."""
    group = incident_group_of(request)
    if group is None:
        return {
            "plan": None,
            "scope": "incident",
            "problems": ["That is not a group of the incidents page."],
        }
    run_ids = list(
        selectors.incident_runs(
            **group,
            failed_since=timezone.now() - INCIDENT_WINDOW_MAX,
            teams=seen_teams(request, OPERATE_RUNS),
        ).values_list("run_id", flat=True)[:BULK_LIMIT]
    )
    if not run_ids:
        return {"plan": None, "scope": "incident", "problems": ["No run has that cause any more."]}
    plan = resume_process.bulk_preview(action=action, run_ids=run_ids, max_resumes=max_resumes)
    return {"plan": plan, "scope": "incident", "problems": []}


def _acting_on(request: HtmxHttpRequest, run_ids: list[str]) -> list[str]:
    """``run_ids`` without the runs of teams the person may not operate in (kept in order)."""
    teams = seen_teams(request, OPERATE_RUNS)
    if teams is None or not run_ids:
        return run_ids
    mine = set(scope_runs(Run.objects.filter(pk__in=run_ids), teams).values_list("pk", flat=True))
    return [r for r in run_ids if r in mine]


def _filter_words(query: dict[str, str]) -> str:
    return ", ".join(f"{k} = {v}" for k, v in query.items() if k != "order") or "every run"


@require_GET
@login_required
@permission_required(OPERATE_RUNS, raise_exception=True)
def bulk_preview(request: HtmxHttpRequest) -> HttpResponse:
    """What the action will do to each run. Reads only."""
    action = request.GET.get("action", "")
    if action not in selectors.BULK_ACTIONS:
        problem = f"Choose an action: {', '.join(selectors.BULK_ACTIONS)}."
        return render(request, "runs/bulk_preview.html", {"problems": [problem]}, status=400)
    max_resumes, budget_problem = _max_resumes(request.GET.get("max_resumes", ""))
    if action == "cancel":
        max_resumes = None  # a cancel has no budget
    context = _plan(request, action, max_resumes)
    plan: selectors.BulkPlan | None = context["plan"]
    context.update(
        action=action,
        max_resumes=max_resumes,
        form=BulkApplyForm(initial={"action": action}),
        targets=plan.targets if plan else {},
        problems=[*context["problems"], *([budget_problem] if budget_problem else [])],
    )
    return render(request, "runs/bulk_preview.html", context, status=200 if plan else 400)


@require_POST
@login_required
@permission_required(OPERATE_RUNS, raise_exception=True)
def bulk_apply(request: HtmxHttpRequest) -> HttpResponse:
    """Act on exactly the runs the preview listed (each refuses if it moved since)."""
    form = BulkApplyForm(request.POST)
    targets = form.targets()
    allowed = set(_acting_on(request, list(targets)))
    others = [r for r in targets if r not in allowed]
    targets = {r: v for r, v in targets.items() if r in allowed}
    form.target_errors.extend(f"No run {r!r}." for r in others[:20])
    if not form.is_valid() or not targets:
        problems = [*form.target_errors]
        if not targets:
            problems.append("No runs to act on: go back to the list and preview again.")
        refused = {"apply_errors": form.errors, "problems": problems}
        return render(request, "runs/bulk_done.html", refused, status=400)
    data = form.cleaned_data
    try:
        outcomes = resume_process.bulk_apply(
            action=data["action"],
            targets=targets,
            by=request.user,
            reason=data["reason"],
            max_resumes=data["max_resumes"] if data["action"] != "cancel" else None,
        )
    except transitions.OperationError as exc:
        return render(request, "runs/bulk_done.html", {"problems": [str(exc)]}, status=400)
    context: dict[str, Any] = {
        "action": data["action"],
        "outcomes": outcomes,
        "done": sum(o.ok for o in outcomes),
        "refused": sum(not o.ok for o in outcomes),
        "problems": form.target_errors,
    }
    return render(request, "runs/bulk_done.html", context)
