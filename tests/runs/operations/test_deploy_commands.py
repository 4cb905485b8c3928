"""The deploy commands (issue 24, finding 3; issue 19, item 6): ``check_deploy`` tells "a run
would block" (exit 1) from "could not check" (exit 2, one line: an agent module that fails to
import, a database that is not migrated or does not answer); ``accept_stale`` accepts a stale
step's stored result from the command line, as the dashboard's stale page does."""

from __future__ import annotations

import getpass
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.db import connection

from harness.cluster import database_url
from ledger import registry
from ledger.models import AuditEvent, Run
from tests.support.announcements import recording
from tests.support.operator_agents import CHAIN, step_of, stopped_stale

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parents[3]


def run_cmd(*args: str) -> tuple[int, str]:
    out = StringIO()
    try:
        call_command(*args, stdout=out)
    except CommandError as exc:
        return exc.returncode, out.getvalue() + str(exc)
    return 0, out.getvalue()


def command(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env={**os.environ, "RUNLEDGER_LOG_FORMAT": "json", **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture(autouse=True)
def _chain_knobs() -> Iterator[None]:
    CHAIN.update(salt="v1", factor=2)
    yield
    CHAIN.update(salt="v1", factor=2)


# --- check_deploy: exit 2 when it could not check ------------------------------------------


def test_an_agent_module_that_failed_to_import_is_could_not_check_in_one_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(registry, "_import_errors", {})
    assert run_cmd("check_deploy")[0] == 0
    registry.record_import_error("acme_agents", ModuleNotFoundError("No module named 'acme_sdk'"))
    code, text = run_cmd("check_deploy")
    assert code == 2
    assert text == (
        "check_deploy: could not check: agent module acme_agents failed to import: "
        "ModuleNotFoundError: No module named 'acme_sdk'"
    )


def test_a_broken_agent_module_exits_2_from_the_shell(tmp_path: Path) -> None:
    (tmp_path / "acme_agents.py").write_text("import a_vendor_sdk_that_is_not_installed\n")
    done = command(
        "check_deploy",
        DATABASE_URL=database_url(),
        PYTHONPATH=os.pathsep.join([str(ROOT), str(tmp_path)]),
        RUNLEDGER_AGENT_MODULES="ledger.examples.agents,acme_agents",
    )
    assert done.returncode == 2, (done.stdout, done.stderr)
    mine = [line for line in done.stderr.splitlines() if "check_deploy" in line]
    assert mine == [
        "CommandError: check_deploy: could not check: agent module acme_agents failed to import:"
        " ModuleNotFoundError: No module named 'a_vendor_sdk_that_is_not_installed'"
    ]
    assert "Traceback" not in done.stdout


@pytest.fixture
def empty_database() -> Iterator[str]:
    """A database on the same server with no table at all (an unmigrated deploy target)."""
    name = f"unmigrated_{uuid.uuid4().hex[:8]}"
    with connection.cursor() as cur:
        cur.execute(f'CREATE DATABASE "{name}"')
    yield database_url({**connection.settings_dict, "NAME": name})
    with connection.cursor() as cur:
        cur.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.mark.skipif("connection.vendor != 'postgresql'")
def test_an_unmigrated_database_exits_2_in_one_line(empty_database: str) -> None:
    done = command("check_deploy", DATABASE_URL=empty_database)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert done.stdout == ""
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("CommandError: check_deploy: could not check: the database is not ")
    assert "migrations not applied: runledger migrate" in line


def test_an_unreachable_database_exits_2_in_one_line() -> None:
    done = command("check_deploy", DATABASE_URL="postgres://nobody@127.0.0.1:1/none")
    assert done.returncode == 2, (done.stdout, done.stderr)
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("CommandError: check_deploy: could not check: the database does not")


# --- accept_stale ---------------------------------------------------------------------------


def test_accept_stale_keeps_the_stored_result_and_queues_the_resume(execute, crash_at) -> None:
    run = stopped_stale(execute, crash_at)
    b = step_of(run, "b")
    with recording() as announced:
        code, text = run_cmd("accept_stale", run.run_id, "--reason", "the salt is cosmetic")
    assert code == 0, text
    assert text.strip() == f"run {run.run_id}: accepted the stored result of b; queued"
    accepted = step_of(run, "b")
    assert accepted.result == b.result and accepted.input_hash != b.input_hash
    assert accepted.inputs == {"v": 21, "salt": "v2"}
    assert announced.seen == [(run.run_id, "stale")]
    event = AuditEvent.objects.get(action="stale_accept")
    assert (event.actor, event.step_id, event.reason) == (
        f"cli:{getpass.getuser()}",
        "b",
        "the salt is cosmetic",
    )
    outcome = execute(run.run_id, worker="worker-3")
    assert (outcome.status, step_of(run, "b").attempt) == ("succeeded", 1)


def _state(run_id: str) -> tuple[Any, ...]:
    run = Run.objects.get(pk=run_id)
    return run.status, run.version, [(s.step_id, s.version) for s in run.steps.order_by("seq")]


def test_accept_stale_refuses_what_is_not_stale_and_writes_nothing(execute, crash_at) -> None:
    run = stopped_stale(execute, crash_at)
    before = _state(run.run_id)
    for args, why in (
        (["--step", "a"], "not stale: a resume would replay it"),
        (["--step", "zz"], "has no step 'zz'"),
    ):
        code, text = run_cmd("accept_stale", run.run_id, "--reason", "r", *args)
        assert (code, why in text) == (1, True), text
    code, text = run_cmd("accept_stale", "run_nosuchrun", "--reason", "r")
    assert (code, text) == (1, "no run run_nosuchrun")
    code, text = run_cmd("accept_stale", run.run_id, "--reason", "  ")
    assert code == 1 and "reason" in text
    assert _state(run.run_id) == before
    assert not AuditEvent.objects.filter(action="stale_accept").exists()


def test_accept_stale_without_a_step_needs_a_run_stopped_on_a_stale_one(execute) -> None:
    from ledger import transitions

    run = transitions.run_start(agent="ops-chain", inputs={"n": 2})
    execute(run.run_id)
    code, text = run_cmd("accept_stale", run.run_id, "--reason", "r")
    assert code == 1
    assert "is succeeded, not stopped on a stale step: name the step (--step)" in text
