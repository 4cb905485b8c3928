"""Teams' core (``ledger.teams``, ``runs.dashboard.teams``): where a run's team comes from, and
what a person's team roles let them see and do — decided on the server, per run."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User

from ledger import registry, transitions
from ledger.agents import agent
from ledger.errors import AgentDefinitionError, InvalidInput
from ledger.models import Run
from runs.dashboard.models import OPERATE_RUNS, VIEW_DASHBOARD, TeamRole
from runs.dashboard.teams import forget, may, scope_runs, teams_for
from tests.support.dashboard_runs import start, user_in

pytestmark = [pytest.mark.sqlite_ok, pytest.mark.django_db(transaction=True)]


@pytest.fixture(autouse=True)
def _agents(dashboard_ready: None) -> Any:
    @agent("team-payments-agent", team="payments")
    def paid(ctx: Any, inputs: dict[str, Any]) -> str:
        return "ok"

    @agent("team-less-agent")
    def plain(ctx: Any, inputs: dict[str, Any]) -> str:
        return str(ctx.now())

    yield
    for name in ("team-payments-agent", "team-less-agent"):
        registry._agents.pop(name, None)


def test_a_runs_team_is_its_starts_else_its_agents_else_the_default(clock: Any) -> None:
    assert start("team-payments-agent", {}, clock).team == "payments"
    assert start("team-less-agent", {}, clock).team == "default"
    assert start("team-payments-agent", {}, clock, team="search").team == "search"
    with pytest.raises(InvalidInput, match="team"):
        start("team-less-agent", {}, clock, team="Not A Team")
    assert not Run.objects.filter(team="Not A Team").exists()


def test_a_fork_keeps_its_parents_team(clock: Any, execute: Any) -> None:
    run = start("team-less-agent", {}, clock, team="search")
    execute(run.run_id)
    step = run.steps.order_by("seq").first()
    assert step is not None
    fork = transitions.run_fork(
        run_id=run.run_id, step_id=step.step_id, by=user_in("admin", "forker"), reason="try"
    )
    assert Run.objects.get(pk=fork.run_id).team == "search"


def test_a_bad_team_in_a_declaration_is_refused() -> None:
    with pytest.raises(AgentDefinitionError, match="team"):
        agent("bad-team-agent", team="Payments!")


def test_team_roles_scope_what_a_person_sees_and_may_do(clock: Any) -> None:
    paid = start("team-payments-agent", {}, clock)
    other = start("team-less-agent", {}, clock)
    person = User.objects.create_user(username="pat", password="x" * 12)
    TeamRole.objects.create(user=person, team="payments", role="operator")
    person = User.objects.get(pk=person.pk)

    assert teams_for(person, VIEW_DASHBOARD) == {"payments"}
    assert person.has_perm(VIEW_DASHBOARD) and person.has_perm(OPERATE_RUNS)
    assert person.has_perm(OPERATE_RUNS, paid) and not person.has_perm(OPERATE_RUNS, other)
    assert may(person, VIEW_DASHBOARD, paid) and not may(person, VIEW_DASHBOARD, other)
    seen = scope_runs(Run.objects.all(), teams_for(person, VIEW_DASHBOARD))
    assert list(seen.values_list("run_id", flat=True)) == [paid.run_id]

    TeamRole.objects.filter(user=person).update(role="viewer")
    forget(person)
    assert not person.has_perm(OPERATE_RUNS, paid) and person.has_perm(VIEW_DASHBOARD, paid)


def test_a_role_group_holds_in_every_team(clock: Any) -> None:
    paid = start("team-payments-agent", {}, clock)
    viewer = user_in("viewer", "everywhere")
    assert teams_for(viewer, VIEW_DASHBOARD) is None
    assert viewer.has_perm(VIEW_DASHBOARD, paid) and not viewer.has_perm(OPERATE_RUNS, paid)
    assert scope_runs(Run.objects.all(), None).count() == 1
    nobody = User.objects.create_user(username="nobody", password="x" * 12)
    assert teams_for(nobody, VIEW_DASHBOARD) == frozenset()
    assert not nobody.has_perm(VIEW_DASHBOARD)
