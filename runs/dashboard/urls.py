"""The dashboard's URLs (namespace ``runs``): included by the project's ``runs.urls``."""

from __future__ import annotations

import re

from django.urls import path, register_converter

from runs.dashboard.views import (
    alerts,
    approvals,
    audit,
    bulk,
    deploy,
    effects,
    handover,
    incidents,
    notifications,
    pacing,
    pauses,
    preferences,
    questions,
    run_actions,
    run_list,
    run_page,
    schedules,
    settle,
    stale,
    trends,
)

app_name = "runs"


class RunIdConverter:
    """A run id in a URL, for every id a run may have — also ones stored before run ids were
    checked (``ledger.inputs.RUN_ID_PATTERN``), which may hold ``/``, ``%`` or be ``..``.

    ``to_url`` escapes ``%`` and ``/`` (and the dots of an all-dots id) as ``%25``, ``%2F``,
    ``%2E``; Django then quotes the ``%``, so the link reaches the view as the escaped text and
    ``to_python`` undoes it. New ids need no escaping: their links read as the id. A NUL byte
    names no run (PostgreSQL refuses it in a query): such a path is a 404.
    """

    regex = r"[^/\x00]+"
    _ESCAPED = re.compile(r"%(25|2F|2E)", re.IGNORECASE)

    def to_python(self, value: str) -> str:
        return self._ESCAPED.sub(lambda m: chr(int(m.group(1), 16)), value)

    def to_url(self, value: str) -> str:
        text = str(value).replace("%", "%25").replace("/", "%2F")
        if text and set(text) == {"."}:
            text = text.replace(".", "%2E")
        return text or "%00"  # an empty stored id still gets a link (that finds no run)


register_converter(RunIdConverter, "run_id")

urlpatterns = [
    path("", run_list.run_list, name="list"),
    path("runs/<run_id:run_id>/", run_page.run_detail, name="detail"),
    path("runs/<run_id:run_id>/header/", run_page.run_header, name="header"),
    path("runs/<run_id:run_id>/answer/", questions.run_answer, name="answer"),
    path("runs/<run_id:run_id>/steps/", run_page.step_table, name="steps"),
    path("runs/<run_id:run_id>/stream/", run_page.run_stream, name="stream"),
    path("runs/<run_id:run_id>/steps/<int:pk>/result/", run_page.step_result, name="step_result"),
    path("runs/<run_id:run_id>/preview/", run_page.run_preview, name="preview"),
    path("runs/<run_id:run_id>/ledger.json", run_page.ledger_json, name="ledger_json"),
    # The acting side (runs/dashboard/views/): settlements, stale steps, run actions, bulk, audit.
    path("settlements/", settle.settlement_queue, name="settlements"),
    path("runs/<run_id:run_id>/steps/<int:pk>/settle/", settle.settle_page, name="settle"),
    path(
        "runs/<run_id:run_id>/steps/<int:pk>/settle/propose/",
        settle.settle_propose,
        name="settle_propose",
    ),
    path(
        "runs/<run_id:run_id>/steps/<int:pk>/settle/lookup/",
        settle.settle_lookup,
        name="settle_lookup",
    ),
    path("settlements/<int:pk>/approve/", settle.settlement_approve, name="settlement_approve"),
    path("settlements/<int:pk>/reject/", settle.settlement_reject, name="settlement_reject"),
    path("approvals/", approvals.approval_queue, name="approvals"),
    path("approvals/<int:pk>/", approvals.approval_page, name="approval"),
    path("approvals/<int:pk>/approve/", approvals.approval_approve, name="approval_approve"),
    path("approvals/<int:pk>/reject/", approvals.approval_reject, name="approval_reject"),
    path("approvals/link/<str:token>/", approvals.approval_link, name="approval_link"),
    path("runs/<run_id:run_id>/steps/<int:pk>/stale/", stale.stale_page, name="stale"),
    path(
        "runs/<run_id:run_id>/steps/<int:pk>/stale/accept/",
        stale.stale_accept,
        name="stale_accept",
    ),
    path(
        "runs/<run_id:run_id>/steps/<int:pk>/stale/reexecute/",
        stale.stale_reexecute,
        name="stale_reexecute",
    ),
    path("runs/<run_id:run_id>/fork/", run_actions.run_fork, name="fork"),
    path("runs/<run_id:run_id>/clean/", run_actions.run_clean, name="clean"),
    *[
        path(f"runs/<run_id:run_id>/{a}/", run_actions.run_action, {"action": a}, name=a)
        for a in run_actions.RUN_ACTIONS
    ],
    path("runs/<run_id:run_id>/take/", handover.take, name="take"),
    path("runs/<run_id:run_id>/release/", handover.release, name="release"),
    path("runs/<run_id:run_id>/note/", handover.note, name="note"),
    path("bulk/", bulk.bulk_preview, name="bulk"),
    path("bulk/apply/", bulk.bulk_apply, name="bulk_apply"),
    path("audit/", audit.audit, name="audit"),
    path("notifications/", notifications.notifications, name="notifications"),
    path("deploy/", deploy.deploy_page, name="deploy"),
    path("pauses/", pauses.pauses_page, name="pauses"),
    path("pacing/", pacing.pacing_page, name="pacing"),
    path("trends/", trends.trends, name="trends"),
    path("alerts/", alerts.alerts_page, name="alerts"),
    path("alerts/<int:pk>/ack/", alerts.alert_ack, name="alert_ack"),
    path("incidents/", incidents.incidents, name="incidents"),
    path("incidents/group/", incidents.incident_group, name="incident_group"),
    path("preferences/", preferences.preferences, name="preferences"),
    path("pauses/new/", pauses.pause_create, name="pause_create"),
    path("pauses/<int:pk>/lift/", pauses.pause_lift, name="pause_lift"),
    path("schedules/", schedules.schedules_page, name="schedules"),
    path("schedules/<str:schedule_id>/pause/", schedules.schedule_pause, name="schedule_pause"),
    path("schedules/<str:schedule_id>/resume/", schedules.schedule_resume, name="schedule_resume"),
    path("effects/", effects.effect_audits, name="effect_audits"),
    path("effects/run/", effects.effect_audit_run, name="effect_audit_run"),
    path("effects/<int:pk>/", effects.effect_audits, name="effect_audit"),
]
