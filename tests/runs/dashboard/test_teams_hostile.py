"""Hostile cross-team checks of the dashboard (issue 35, teams): signed in as an operator of
team ``alpha``, every dashboard URL pattern (enumerated from ``runs.dashboard.urls``, so a new
view is covered without editing this file) is requested with the runs, steps, settlements,
gates and pauses of team ``beta`` in its URL and in its form fields, GET and POST: a route about
an object answers 404 (the page of a missing one), any other route answers without showing a
beta run, and nothing is written. Then the lists, counts, searches, trends and exports, a viewer
who may not act in their own team, and a role in every team that sees both.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from harness.cluster import Cluster
from ledger import selectors, transitions
from ledger.models import (
    AuditEvent,
    Gate,
    Notification,
    Pause,
    Run,
    RunStatus,
    Settlement,
    Step,
    StepKind,
    StepStatus,
)
from ledger.selectors.trends import run_trends
from ledger.transitions.gate_links import gate_link_token
from ledger.transitions.trends import fold_trends
from runs.dashboard.models import TeamRole
from runs.dashboard.urls import urlpatterns as dashboard
from tests.support.dashboard_runs import (
    client_for,
    renewal_run,
    restore_roles,
    rewind,
    start,
    user_in,
)

pytestmark = [pytest.mark.django_db(transaction=True)]

#: Words only beta's runs carry (their titles name these customers and invoices).
BETA_WORDS = ("Renew the subscription of cus_lovelace", "Pay out invoice inv_1004")
ALPHA_WORDS = ("Renew the subscription of cus_knuth",)


@pytest.fixture(autouse=True)
def broker(tmp_path: Path) -> Iterator[Cluster]:
    cluster = Cluster(tmp_path / "broker")
    with cluster.producing():
        yield cluster


def member(name: str, team: str, role: str) -> User:
    user = User.objects.create_user(username=name, password=None)
    TeamRole.objects.create(user=user, team=team, role=role)
    return User.objects.get(pk=user.pk)


@pytest.fixture
def world(execute, clock, crash_at, settings) -> dict[str, Any]:
    """Team alpha: one blocked renewal. Team beta: a blocked renewal with a proposed
    settlement, a payout waiting at its approval gate, a run pause; each with their audit."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    restore_roles()
    rewind(clock)
    execute.clock = clock
    # Each run starts in its team (the default team, set for the start), driven by the engine.
    settings.RUNLEDGER_DEFAULT_TEAM = "alpha"
    alpha = renewal_run(execute, crash_at, customer="cus_knuth")
    settings.RUNLEDGER_DEFAULT_TEAM = "beta"
    beta = renewal_run(execute, crash_at, customer="cus_lovelace")
    settings.RUNLEDGER_DEFAULT_TEAM = "default"
    assert (alpha.team, beta.team) == ("alpha", "beta")
    gated = start("payout", {"invoice_id": "inv_1004"}, clock, team="beta")
    assert execute(gated.run_id).reason == "approval"
    gate = Gate.objects.get(run=gated)
    admin = User.objects.create_superuser(username="root", password=None)
    step = Step.objects.get(run=beta, status=StepStatus.STARTED, kind=StepKind.EFFECT)
    settlement = transitions.settlement_propose(
        step=step, outcome="not_happened", reason="checked", by=admin, seen_version=step.version
    )
    pause = transitions.pause_create(scope="run", target=beta.run_id, by=admin, reason="hold")
    alice = member("alice", "alpha", "operator")
    return {
        "alpha": alpha,
        "beta": beta,
        "gated": gated,
        "gate": gate,
        "step": step,
        "settlement": settlement,
        "pause": pause,
        "alice": alice,
        "client": client_for(alice),
        "link": gate_link_token(gate=gate, username="alice"),
        "missing_link": gate_link_token(gate=Gate(pk=99999999), username="alice"),
    }


def state() -> Any:
    """Everything an act could change: the rows of every table an action writes."""
    return (
        list(Run.objects.order_by("pk").values_list("pk", "status", "version", "team")),
        Step.objects.count(),
        list(Settlement.objects.order_by("pk").values_list("pk", "status")),
        list(Gate.objects.order_by("pk").values_list("pk", "status", "approved_by", "links_used")),
        list(Pause.objects.order_by("pk").values_list("pk", "lifted_at")),
        AuditEvent.objects.count(),
        Notification.objects.count(),
    )


_CONVERTER = re.compile(r"<(?:(\w+):)?(\w+)>")
#: The URL routes whose ``<int:pk>`` names something other than a step of the run.
_PK_OF = {
    "settlements/<int:pk>/": "settlement",
    "approvals/<int:pk>": "gate",
    "pauses/<int:pk>/": "pause",
}


def _url(route: str, world: dict[str, Any], *, missing: bool = False) -> str:
    """The route naming beta's objects (``missing``: objects that do not exist at all)."""
    pk = str(world["step"].pk)
    for prefix, name in _PK_OF.items():
        if route.startswith(prefix):
            pk = str(world[name].pk)
    parts = {
        "run_id": "run_0000missing" if missing else world["beta"].run_id,
        "pk": "99999999" if missing else pk,
        "token": world["missing_link"] if missing else world["link"],
        "schedule_id": "sch_0000",
    }
    return "/" + _CONVERTER.sub(lambda m: quote(parts[m.group(2)], safe=""), route)


def _fields(world: dict[str, Any]) -> dict[str, Any]:
    """Form fields naming beta's objects: whatever a view reads, it reads one of beta's."""
    beta = world["beta"]
    return {
        "run": beta.run_id,
        "target": [f"{beta.run_id}:{beta.version}", beta.run_id],
        "scope": "run",
        "action": "cancel",
        "reason": "hostile",
        "seen_version": str(beta.version),
        "outcome": "not_happened",
        "evidence_seen": "x",
        "acknowledge": "on",
        "decision": "approve",
        "expected": "1",
        "expires_in": "60",
        "seen_holder": "",
        "text": "a note",
        "key": "k1",
        "step_id": world["step"].step_id,
        "q": beta.run_id,
        "i_status": "needs_attention",
        "i_agent": "renewal",
        "i_step": "charge",
        "i_reason": "reconciliation",
        "i_sig": beta.signature,
        "answer": "{}",
    }


#: Routes about no object: answered, but with nothing of beta's in them.
_OBJECT = ("<run_id:run_id>", "<int:pk>", "<str:token>", "<str:schedule_id>")


@pytest.mark.parametrize("pattern", dashboard, ids=lambda p: p.name)
def test_every_url_with_another_teams_object_is_a_missing_one_and_writes_nothing(
    world, pattern
) -> None:
    route = str(pattern.pattern)
    url = _url(route, world)
    client: Client = world["client"]
    about_an_object = any(part in route for part in _OBJECT)
    for method in ("get", "post"):
        before = state()
        send = client.get if method == "get" else client.post
        response = send(url, _fields(world))
        assert state() == before, (method, url)
        if about_an_object:
            # Beta's object is answered exactly as a missing one: 404 (or, for a permission the
            # person holds in no team, the same 403 before any lookup; 405 for the method).
            missing = send(_url(route, world, missing=True), _fields(world))
            assert response.status_code in {403, 404, 405}, (method, url, response.status_code)
            assert response.status_code == missing.status_code, (method, url)
        else:
            assert response.status_code in {200, 204, 302, 400, 403, 404, 405, 409}, (method, url)
            body = b"".join(response.streaming_content) if response.streaming else response.content
            for word in BETA_WORDS:
                assert word not in body.decode(errors="replace"), (method, url, word)


def test_lists_counts_search_trends_and_exports_hold_only_the_teams_runs(world) -> None:
    client: Client = world["client"]
    beta, alpha = world["beta"], world["alpha"]
    pages = [
        "/",
        "/?q=cus_lovelace",
        "/?q=renew",
        f"/?q={beta.run_id}",
        "/?status=needs_attention&order=oldest",
        "/?team=beta",
        "/approvals/",
        "/settlements/",
        "/incidents/",
        "/trends/",
        "/audit/",
        f"/audit/?run={beta.run_id}",
        "/notifications/",
        "/pauses/",
    ]
    for url in pages:
        response = client.get(url)
        assert response.status_code == 200, url
        html = response.content.decode()
        for word in BETA_WORDS:
            assert word not in html, (url, word)
        assert beta.run_id not in html.replace(f"q={beta.run_id}", "").replace(
            f'value="{beta.run_id}"', ""
        ), url
    listed = client.get("/?q=renew").content.decode()
    assert ALPHA_WORDS[0] in listed and alpha.run_id in listed
    assert client.get(f"/runs/{alpha.run_id}/ledger.json").status_code == 200
    assert client.get(f"/runs/{beta.run_id}/ledger.json").status_code == 404
    # The counts a team member sees are their team's, exactly.
    mine = selectors.run_status_counts(now=timezone.now(), teams={"alpha"})
    assert mine.total == 1 and mine.by_status[RunStatus.NEEDS_ATTENTION] == 1
    every = selectors.run_status_counts(now=timezone.now())
    assert every.total == Run.objects.count() == 3
    tile = '<span class="n">{}</span><span class="l">needs attention</span>'
    counts_html = client.get("/", headers={"HX-Request": "true", "HX-Target": "status-counts"})
    assert counts_html.status_code == 200 and tile.format(1) in counts_html.content.decode()
    everyone = client_for(user_in("viewer", name="evelyn"))
    assert tile.format(3) in everyone.get("/").content.decode()
    # Trends: the team's runs only (the rollup keeps each team's rows).
    fold_trends()
    trend = run_trends(window="24h", now=timezone.now(), teams={"alpha"})
    assert sum(trend.total.entered.values()) >= 1
    assert all(a.agent == "renewal" for a in trend.agents)
    beta_only = run_trends(window="24h", now=timezone.now(), teams={"beta"})
    assert {a.agent for a in beta_only.agents} == {"renewal", "payout"}


def test_the_team_column_and_filter_show_for_a_reader_of_several_teams(world) -> None:
    everyone = client_for(user_in("viewer", name="evelyn"))
    html = everyone.get("/").content.decode()
    assert "<th>Team</th>" in html and 'name="team"' in html
    for word in (*BETA_WORDS, *ALPHA_WORDS):
        assert word in html
    only_beta = everyone.get("/?team=beta").content.decode()
    assert BETA_WORDS[0] in only_beta and ALPHA_WORDS[0] not in only_beta
    alice_page = world["client"].get("/").content.decode()
    assert "<th>Team</th>" not in alice_page
    assert "operator in alpha" in alice_page


def test_a_team_viewer_may_read_but_not_act_in_their_team(world) -> None:
    alpha = world["alpha"]
    vic = client_for(member("vic", "alpha", "viewer"))
    assert vic.get(f"/runs/{alpha.run_id}/").status_code == 200
    before = state()
    cancel = vic.post(
        f"/runs/{alpha.run_id}/cancel/", {"reason": "no", "seen_version": alpha.version}
    )
    assert cancel.status_code == 403
    assert vic.get(f"/runs/{alpha.run_id}/ledger.json").status_code == 403
    assert state() == before


def test_an_operator_of_the_team_acts_there_and_a_bulk_action_skips_other_teams(world) -> None:
    alpha, beta = world["alpha"], world["beta"]
    client: Client = world["client"]
    targets = [f"{alpha.run_id}:{alpha.version}", f"{beta.run_id}:{beta.version}"]
    done = client.post("/bulk/apply/", {"action": "cancel", "reason": "bulk", "target": targets})
    assert done.status_code == 200
    assert Run.objects.get(pk=alpha.pk).status == RunStatus.CANCELLED
    assert Run.objects.get(pk=beta.pk).status == RunStatus.NEEDS_ATTENTION
    assert Run.objects.get(pk=beta.pk).version == beta.version


def test_a_role_in_every_team_sees_both(world) -> None:
    everyone = client_for(user_in("viewer", name="evelyn"))
    for run in (world["alpha"], world["beta"]):
        assert everyone.get(f"/runs/{run.run_id}/").status_code == 200
    html = everyone.get("/approvals/").content.decode()
    assert "inv_1004" in html or world["gated"].run_id in html
