"""Teams through the HTTP API, tried as a hostile user of another team would (issue 35).

Every operation of the OpenAPI document is called by tokens of the team ``alpha`` — a team's
service tokens, and tokens of people whose roles are in ``alpha`` only — against the objects of
the team ``beta`` (its runs, steps, settlements, gates, pauses, subscriptions, alerts,
schedules): an operation about an object answers 404 (the same problem as for an object that
does not exist), one that names another team in its body 403 (or 404 for a run), a list answers
none of ``beta``'s rows, and nothing at all is written. The walk checks that it covers every
operation of the document: a route added later without a row here fails it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from harness.unannounced import start_unannounced
from ledger import events, transitions
from ledger.models import Alert, Gate, Run, Schedule, Step, WebhookSubscription
from ledger.processes.execute import run_execute
from runs.api import tokens
from runs.api.urls import api
from runs.dashboard.models import TeamRole
from tests.runs.api.conftest import Caller
from tests.runs.api.test_api_roles import ALLOWED
from tests.support.api_rows import ledger_rows

pytestmark = pytest.mark.django_db(transaction=True)

#: What an operation that is not about an object in its path sends: beta's team, or a run of
#: beta's, in its body — and the answer expected (403: the team is the caller's own input;
#: 422: a run of another team named in a body is refused exactly as a run that does not exist
#: is). Every such operation has a row (see the test).
BODIES: dict[tuple[str, str], tuple[int, Callable[[dict[str, Any]], Any]]] = {
    ("post", "/api/v1/runs"): (
        403,
        lambda w: {"agent": "refund", "inputs": {"invoice_id": "inv_9"}, "team": "beta"},
    ),
    ("post", "/api/v1/runs/batch"): (
        403,
        lambda w: {"runs": [{"agent": "refund", "inputs": {"invoice_id": "i"}, "team": "beta"}]},
    ),
    ("post", "/api/v1/pauses"): (
        422,
        lambda w: {"scope": "run", "target": w["run_id"], "reason": "mine now"},
    ),
    ("post", "/api/v1/webhooks"): (
        422,
        lambda w: {"url": "https://app.example.org/hooks", "run_id": w["run_id"]},
    ),
    ("post", "/api/v1/schedules"): (
        403,
        lambda w: {
            "name": "stolen",
            "agent": "refund",
            "interval": 3600,
            "inputs": {"invoice_id": "inv_1001"},
            "team": "beta",
        },
    ),
}

#: The bodies of operations about an object (what they send matters little: they answer 404
#: before reading it; these would succeed on an object of the caller's own team).
OBJECT_BODIES: dict[str, dict[str, Any]] = {
    "/resume": {"reason": "go on"},
    "/retry": {"reason": "go on"},
    "/cancel": {"reason": "stop"},
    "/settlements": {"outcome": "abandon", "reason": "gone", "seen_version": 0},
    "/approve": {"reason": "ok"},
    "/reject": {"reason": "no"},
    "/accept-stale": {"reason": "same meaning"},
    "/lift": {"reason": "back", "expected": 1},
    "/take": {"seen_holder": ""},
    "/notes": {"text": "looked at it", "key": "hostile"},
    "/events": {"name": "reply", "payload": 1, "event_id": "hostile"},
    "/answer": {"answer": {"approve": True}},
    "/pause": {"reason": "mine"},
}


def operations() -> list[tuple[str, str]]:
    doc = api.get_openapi_schema(path_prefix="/api/v1/")
    return [(m, p) for p, ops in doc["paths"].items() for m in ops]


@pytest.fixture
def beta(blocked: Any) -> dict[str, Any]:
    """One of each object, all of the team beta (and one run of alpha, to see lists work)."""
    run = blocked()
    Run.objects.filter(pk=run.run_id).update(team="beta")  # the refund agent declares none
    step = Step.objects.get(run=run, step_id="notify")
    settlement = transitions.settlement_propose(
        step=step,
        outcome="not_happened",
        result=None,
        reason="not sent",
        by="ops",
        seen_version=step.version,
    )
    gated = start_unannounced(agent="payout", inputs={"invoice_id": "inv_1003"}, team="beta")
    waiting = run_execute(run_id=gated.run_id, worker="worker-1", heartbeat=False)
    assert waiting.reason == "approval", waiting
    paused = start_unannounced(agent="refund", inputs={"invoice_id": "inv_1004"}, team="beta")
    pause = transitions.pause_create(scope="run", target=paused.run_id, by="ops", reason="hold")
    run_hook, _ = events.subscribe("https://app.example.org/run", run_id=run.run_id)
    agent_hook, _ = events.subscribe("https://app.example.org/a", agent="payout", team="beta")
    alert = Alert.objects.create(
        rule="stuck",
        dedup_key="runledger/stuck/beta",
        summary="stuck",
        detail={"run_ids": [run.run_id], "count": 1},
        opened_at=timezone.now(),
        seen_at=timezone.now(),
    )
    nightly = transitions.schedule_add(
        name="nightly",
        agent="refund",
        inputs={"invoice_id": "inv_1001"},
        cron="0 3 * * *",
        by="ops",
        team="beta",
    )
    mine = start_unannounced(agent="refund", inputs={"invoice_id": "inv_2001"}, team="alpha")
    world = {
        "run_id": run.run_id,
        "step": step.pk,
        "pk": settlement.pk,
        "gate_id": Gate.objects.get(run_id=gated.run_id).pk,
        "pause_id": pause.pk,
        "subscription_id": agent_hook.pk,
        "alert_id": alert.pk,
        "schedule": nightly.schedule_id,
        "mine": mine.run_id,
        # What no answer to alpha may hold.
        "secrets": [
            run.run_id,
            gated.run_id,
            paused.run_id,
            nightly.schedule_id,
            "runledger/stuck/beta",
            "https://app.example.org/",
        ],
        "run_hook": run_hook.pk,
    }
    return world


def person(name: str, team_roles: dict[str, str]) -> User:
    """A person with no role group, holding ``team_roles`` ({team: role}) only."""
    user = User.objects.create_user(username=name)
    for team, role in team_roles.items():
        TeamRole.objects.create(user=user, team=team, role=role)
    return user


@pytest.fixture
def alpha(client: Client) -> dict[str, Caller]:
    """The tokens of alpha: its service tokens (bound to alpha), a person's token bound to alpha,
    and tokens bound to no team of people whose roles are in alpha only."""
    from tests.support.dashboard_runs import restore_roles

    restore_roles()
    olga = person("olga", {"alpha": "operator"})
    abe = person("abe", {"alpha": "approver"})
    made = {
        "viewer (team token)": tokens.token_create(name="a-view", role="viewer", team="alpha"),
        "operator (team token)": tokens.token_create(name="a-op", role="operator", team="alpha"),
        "approver (abe, team token)": tokens.token_create(
            name="a-abe", role="approver", user=abe, team="alpha"
        ),
        "operator (olga, no team)": tokens.token_create(name="olga", role="operator", user=olga),
        "approver (abe, no team)": tokens.token_create(name="abe", role="approver", user=abe),
    }
    return {label: Caller(client=client, secret=m.secret) for label, m in made.items()}


def _call(who: Caller, method: str, template: str, world: dict[str, Any]) -> Any:
    path = template.format(**world)
    header = {"HTTP_AUTHORIZATION": f"Bearer {who.secret}"}
    if method == "get":
        query = "?timeout=0" if path.endswith("/wait") else ""
        answer = who.client.get(path + query, **header)
        answer.close()  # a stream (never read here) gives its place back
        return answer
    if method == "delete":
        return who.client.delete(path, **header)
    if "{" in template:
        body = next((b for s, b in OBJECT_BODIES.items() if template.endswith(s)), {})
    else:
        body = BODIES[(method, template)][1](world)
    return who.client.post(path, data=json.dumps(body), content_type="application/json", **header)


def test_the_walk_has_a_row_for_every_operation_without_an_object() -> None:
    """A new operation whose path names no object needs a row in BODIES (what it would send
    of another team's, and what it must answer): the walk refuses to skip it."""
    bare = {(m, p) for m, p in operations() if "{" not in p and m != "get"}
    assert bare == set(BODIES)
    assert any("{" in p for _, p in operations())


def test_every_operation_on_another_teams_objects_answers_404_and_writes_nothing(
    beta: dict[str, Any], alpha: dict[str, Caller]
) -> None:
    walked: set[tuple[str, str]] = set()
    before = ledger_rows()
    for label, who in alpha.items():
        for method, template in operations():
            answer = _call(who, method, template, beta)
            where = (label, method, template, answer.status_code, answer.content[:300])
            assert answer.status_code != 500, where
            role = label.split(" ")[0]
            if "{" in template:
                # 404 wherever the token's role may do it; a role that may not do it at all
                # (test_api_roles.ALLOWED) may be refused first, about no object (403).
                allowed = role in ALLOWED[(method, template)]
                assert answer.status_code in ((404,) if allowed else (403, 404)), where
                assert answer["Content-Type"] == "application/problem+json", where
            elif method == "get":
                assert answer.status_code == 200, where
                text = answer.content.decode()
                for secret in beta["secrets"]:
                    assert secret not in text, (where, secret)
            else:
                expected = BODIES[(method, template)][0]
                # A role that may not do it at all is refused before the body is read.
                allowed = role in ALLOWED[(method, template)]
                assert answer.status_code in ((expected,) if allowed else (403,)), where
            walked.add((method, template))
            assert ledger_rows() == before, where
    assert walked == set(operations())


def test_the_same_operations_reach_the_callers_own_team(
    beta: dict[str, Any], alpha: dict[str, Caller]
) -> None:
    """The 404s above are about the team, not the tokens: on alpha's run they answer."""
    olga = alpha["operator (olga, no team)"]
    mine = beta["mine"]
    assert olga.get(f"/api/v1/runs/{mine}").json()["team"] == "alpha"
    taken = olga.post(f"/api/v1/runs/{mine}/take", {"seen_holder": ""})
    assert taken.status_code == 200, taken.content
    listed = olga.get("/api/v1/runs").json()["runs"]
    assert [r["run_id"] for r in listed] == [mine]
    assert {r["team"] for r in listed} == {"alpha"}
    # Even asked by name, beta's runs are not listed.
    assert olga.get("/api/v1/runs?team=beta").json()["runs"] == []


def test_a_team_token_starts_in_its_team_and_may_not_name_another(
    alpha: dict[str, Caller],
) -> None:
    op = alpha["operator (team token)"]
    body = {"agent": "refund", "inputs": {"invoice_id": "inv_3001"}}
    made = op.post("/api/v1/runs", body)
    assert made.status_code == 201, made.content
    assert made.json()["team"] == "alpha"
    again = op.post("/api/v1/runs", body | {"run_id": made.json()["run_id"]})
    assert again.status_code == 200 and again.json()["created"] is False, again.content
    before = ledger_rows()
    refused = op.post("/api/v1/runs", body | {"team": "beta"})
    assert refused.status_code == 403, refused.content
    assert "beta" in refused.json()["detail"]
    assert ledger_rows() == before
    # A repeat of a start that names a run of another team does not tell it either.
    theirs = start_unannounced(agent="refund", inputs={"invoice_id": "inv_3001"}, team="beta")
    before = ledger_rows()
    hidden = op.post("/api/v1/runs", body | {"run_id": theirs.run_id})
    assert hidden.status_code == 404, hidden.content
    assert ledger_rows() == before


def test_a_token_of_every_team_names_the_team_of_its_start(client: Client, caller: Any) -> None:
    ops = caller("operator")
    made = ops.post("/api/v1/runs", {"agent": "refund", "inputs": {"invoice_id": "i"},
                                     "team": "payments"})  # fmt: skip
    assert made.status_code == 201, made.content
    assert Run.objects.get(pk=made.json()["run_id"]).team == "payments"
    batch = ops.post("/api/v1/runs/batch", {"runs": [
        {"agent": "refund", "inputs": {"invoice_id": "j"}, "team": "search"},
        {"agent": "refund", "inputs": {"invoice_id": "k"}},
    ]})  # fmt: skip
    assert batch.status_code == 201, batch.content
    assert [r["team"] for r in batch.json()["runs"]] == ["search", "default"]
    listed = ops.get("/api/v1/runs?team=search").json()["runs"]
    assert [r["team"] for r in listed] == ["search"]
    bad = ops.post("/api/v1/runs", {"agent": "refund", "inputs": {}, "team": "Not A Team"})
    assert bad.status_code == 422, bad.content


def test_demoting_a_person_in_their_team_takes_their_tokens_rights_there_at_once(
    beta: dict[str, Any], alpha: dict[str, Caller]
) -> None:
    olga = alpha["operator (olga, no team)"]
    mine = beta["mine"]
    note = {"text": "mine", "key": "k1"}
    assert olga.post(f"/api/v1/runs/{mine}/notes", note).status_code == 200
    TeamRole.objects.filter(user__username="olga", team="alpha").update(role="viewer")
    before = ledger_rows()
    refused = olga.post(f"/api/v1/runs/{mine}/notes", {"text": "again", "key": "k2"})
    assert refused.status_code == 403, refused.content
    assert ledger_rows() == before
    assert olga.get(f"/api/v1/runs/{mine}").status_code == 200  # still reads alpha
    TeamRole.objects.filter(user__username="olga").delete()
    refused = olga.get(f"/api/v1/runs/{mine}")
    assert refused.status_code == 403, refused.content  # in no team: no read at all
    # Moved to beta, the same token follows her there and no longer sees alpha.
    TeamRole.objects.create(user=User.objects.get(username="olga"), team="beta", role="viewer")
    assert olga.get(f"/api/v1/runs/{mine}").status_code == 404
    assert olga.get(f"/api/v1/runs/{beta['run_id']}").status_code == 200


def test_a_team_token_of_a_person_without_a_role_there_may_do_nothing(
    client: Client, beta: dict[str, Any]
) -> None:
    from tests.support.dashboard_runs import restore_roles

    restore_roles()
    olga = person("olga", {"beta": "operator"})
    made = tokens.token_create(name="olga-beta", role="operator", user=olga, team="beta")
    TeamRole.objects.filter(user=olga).update(team="gamma")
    who = Caller(client=client, secret=made.secret)
    refused = who.get(f"/api/v1/runs/{beta['run_id']}")
    assert refused.status_code in (403, 404), refused.content
    assert who.get("/api/v1/runs").status_code == 403


def test_a_persons_token_cannot_be_made_for_a_team_they_have_no_role_in() -> None:
    olga = person("olga", {"alpha": "operator"})
    with pytest.raises(ValueError, match="beta"):
        tokens.token_create(name="olga-beta", role="operator", user=olga, team="beta")
    with pytest.raises(ValueError, match="team"):
        tokens.token_create(name="svc", role="operator", team="Not A Team")
    assert tokens.token_create(name="olga-alpha", role="operator", user=olga, team="alpha")


def test_the_root_says_the_tokens_team_and_reach(alpha: dict[str, Caller]) -> None:
    doc = alpha["operator (team token)"].get("/api/v1/").json()["token"]
    assert doc["team"] == "alpha" and doc["role"] == "operator" and doc["person"] is None
    assert doc["teams"]["operate"] == ["alpha"] and doc["teams"]["approve"] == []
    doc = alpha["operator (olga, no team)"].get("/api/v1/").json()["token"]
    assert doc["team"] is None and doc["person"] == "olga"
    assert doc["teams"]["read"] == ["alpha"]


def test_an_agent_subscription_of_a_team_hears_only_that_teams_runs(
    alpha: dict[str, Caller],
) -> None:
    op = alpha["operator (team token)"]
    made = op.post("/api/v1/webhooks", {"url": "https://app.example.org/h", "agent": "refund"})
    assert made.status_code == 201, made.content
    assert made.json()["team"] == "alpha"
    sub = WebhookSubscription.objects.get(pk=made.json()["id"])
    from ledger.transitions.notify import notify_run_event

    theirs = start_unannounced(agent="refund", inputs={"invoice_id": "x"}, team="beta")
    mine = start_unannounced(agent="refund", inputs={"invoice_id": "y"}, team="alpha")
    Run.objects.filter(pk__in=[theirs.run_id, mine.run_id]).update(status="failed")
    assert notify_run_event(run_id=theirs.run_id, at=timezone.now()) == 0
    assert notify_run_event(run_id=mine.run_id, at=timezone.now()) == 1
    assert sub.deliveries.count() == 1
    # Every team's subscription to an agent needs a token of every team.
    refused = alpha["operator (olga, no team)"].post(
        "/api/v1/webhooks", {"url": "https://app.example.org/h", "agent": "refund"}
    )
    assert refused.status_code == 403, refused.content


def test_a_schedule_is_its_teams_and_starts_its_runs_there(alpha: dict[str, Caller]) -> None:
    op = alpha["operator (team token)"]
    made = op.post("/api/v1/schedules", {"name": "hourly", "agent": "refund", "interval": 60,
                                         "inputs": {"invoice_id": "inv_1001"}})  # fmt: skip
    assert made.status_code == 201, made.content
    assert made.json()["team"] == "alpha"
    assert Schedule.objects.get(name="hourly").team == "alpha"
    from ledger.processes.schedules import schedules_tick

    Schedule.objects.filter(name="hourly").update(next_at=timezone.now() - timedelta(seconds=1))
    schedules_tick()
    started = Run.objects.filter(schedule=made.json()["id"])
    assert started.exists() and {r.team for r in started} == {"alpha"}


def test_the_commands_make_team_tokens_and_start_and_list_runs_by_team() -> None:
    from io import StringIO

    from django.core.management import call_command
    from django.core.management.base import CommandError

    from runs.api.models import ApiToken

    out, err = StringIO(), StringIO()
    call_command("create_api_token", "--name=pay", "--role=operator", "--team=payments",
                 stdout=out, stderr=err)  # fmt: skip
    assert ApiToken.objects.get(name="pay").team == "payments"
    assert "team payments" in err.getvalue()
    call_command("create_api_token", "--name=all", "--role=viewer", stdout=out, stderr=err)
    assert ApiToken.objects.get(name="all").team == ""
    person("ann", {"search": "operator"})
    with pytest.raises(CommandError, match="payments"):
        call_command("create_api_token", "--name=ann", "--role=operator", "--user=ann",
                     "--team=payments", stdout=out, stderr=err)  # fmt: skip
    assert not ApiToken.objects.filter(name="ann").exists()

    started = StringIO()
    call_command("start_run", "refund", '--inputs={"invoice_id": "inv_1"}', "--team=payments",
                 stdout=started)  # fmt: skip
    run = Run.objects.get()
    assert run.team == "payments" and run.run_id in started.getvalue()
    start_unannounced(agent="refund", inputs={"invoice_id": "inv_2"}, team="search")
    listed = StringIO()
    call_command("list_runs", "--team=payments", stdout=listed)
    assert run.run_id in listed.getvalue() and "payments" in listed.getvalue()
    assert "1 run(s)" in listed.getvalue()
