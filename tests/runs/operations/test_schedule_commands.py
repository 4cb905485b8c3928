"""`runledger schedules add|list|pause|resume|remove`: a round trip audited as ``cli:<login>``,
and refusals (exit 1, or 2 for an argument that does not parse) that write nothing."""

from __future__ import annotations

import json

import pytest

from ledger.models import AuditEvent, Schedule
from tests.support import paced_agents  # noqa: F401 - registers the agents
from tests.support.commands import run_cmd

pytestmark = [pytest.mark.sqlite_ok, pytest.mark.django_db(transaction=True)]


def test_add_list_pause_resume_remove() -> None:
    code, out = run_cmd(
        "schedules", "add", "nightly", "--agent", "paced-free", "--cron", "0 3 * * *",
        "--timezone", "Europe/Paris", "--inputs", '{"seconds": 0}', "--missed", "once",
        "--priority", "2", "--description", "the nightly report",
    )  # fmt: skip
    assert code == 0, out
    made = Schedule.objects.get()
    assert f"schedule nightly ({made.schedule_id}) added: paced-free, cron 0 3 * * *" in out
    assert (made.timezone, made.missed, made.priority) == ("Europe/Paris", "once", 2)
    code, out = run_cmd("schedules", "add", "often", "--agent", "paced-free", "--every", "15m")
    assert code == 0 and "every 15 min" in out, out
    assert Schedule.objects.get(name="often").interval_seconds == 900

    code, out = run_cmd("schedules", "list")
    assert code == 0 and "nightly" in out and "often" in out and "2 schedule(s)" in out
    code, out = run_cmd("schedules", "list", "--json")
    rows = [json.loads(line) for line in out.splitlines()]
    assert [r["name"] for r in rows] == ["nightly", "often"]
    assert rows[0]["cron"] == "0 3 * * *" and rows[1]["interval"] == 900

    code, out = run_cmd("schedules", "pause", "nightly", "--reason", "report moved")
    assert code == 0 and "paused" in out
    code, out = run_cmd("schedules", "pause", "nightly")
    assert code == 1 and "paused already" in out
    code, out = run_cmd("schedules", "resume", made.schedule_id)  # by id too
    assert code == 0 and "resumed" in out
    code, out = run_cmd("schedules", "remove", "nightly")
    assert code == 0 and "removed" in out
    code, out = run_cmd("schedules", "remove", "nightly")
    assert code == 1 and "no schedule 'nightly'" in out  # its name is free: no live one
    code, out = run_cmd("schedules", "list", "--all")
    assert "removed" in out and "2 schedule(s)" in out
    actions = list(AuditEvent.objects.order_by("id").values_list("action", flat=True))
    assert actions == [
        "schedule_add",
        "schedule_add",
        "schedule_pause",
        "schedule_resume",
        "schedule_remove",
    ]
    (actor,) = {e.actor for e in AuditEvent.objects.all()}
    assert actor.startswith("cli:")


@pytest.mark.parametrize(
    ("args", "code", "says"),
    [
        (["--cron", "61 * * * *"], 1, "is not a cron expression"),
        (["--cron", "* * *"], 1, "five are needed"),
        (["--cron", "0 3 * * *", "--timezone", "Nowhere/Town"], 1, "is not a time zone"),
        (["--every", "0"], 1, "interval: 0 s"),
        (["--every", "soon"], 2, "is not an interval"),
        (["--every", "60", "--inputs", "{nope"], 1, "--inputs"),
        (["--every", "60", "--agent", "ghost"], 1, "no agent named 'ghost'"),
        (["--every", "60", "--agent", "paced"], 1, "concurrency key is inputs.customer"),
        (["--every", "60", "--missed", "never"], 2, "invalid choice"),
        ([], 2, "one of the arguments --cron --every is required"),
    ],
)
def test_bad_input_is_refused_and_nothing_is_written(args: list[str], code: int, says: str) -> None:
    """Exit 1 for a refusal; an argument that does not parse is a usage error (exit 2 from the
    command line; in process Django raises it as a CommandError)."""
    agent = [] if "--agent" in args else ["--agent", "paced-free"]
    got, out = run_cmd("schedules", "add", "bad", *agent, *args)
    assert got == 1 and says in out, out
    assert code == 1 or "Error: " in out
    assert not Schedule.objects.exists() and not AuditEvent.objects.exists()


def test_a_second_schedule_of_a_live_name_is_refused() -> None:
    assert run_cmd("schedules", "add", "x", "--agent", "paced-free", "--every", "60")[0] == 0
    code, out = run_cmd("schedules", "add", "x", "--agent", "paced-free", "--every", "120")
    assert code == 1 and "a schedule named 'x' exists" in out
    assert Schedule.objects.get().interval_seconds == 60
    code, out = run_cmd("schedules", "pause", "ghost")
    assert code == 1 and "no schedule 'ghost'" in out
