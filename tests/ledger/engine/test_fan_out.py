"""Parallel fan-out (``ctx.parallel``): siblings commit independently, a crash re-runs only the
unfinished ones, a failing sibling does not make the finished ones run again.

On PostgreSQL the siblings run on threads, each on its own connection; the SQLite test database
lives in memory and cannot be shared between connections, so there the same fan-outs run one
sibling after another (the engine decides; the assertions about rows and effects are the same).
Crash tests keep the seed's pair: the result equals the uninterrupted run's AND every effect
happened exactly once, counted in the simulators' tables.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from django.utils import timezone

from harness import faults
from harness.cluster import wait_for
from ledger import registry, transitions
from ledger.agents import agent, tool
from ledger.engine import pooling
from ledger.examples import simulators
from ledger.examples.models import OutboxMessage, ProviderCharge
from ledger.models import Run, Step
from ledger.processes import execute
from ledger.processes.preview import preview_resume
from runs.cli import EQUIPMENT_ENV  # the harness's commands, and the examples

pytestmark = pytest.mark.django_db(transaction=True)
both = pytest.mark.sqlite_ok
pg_only = pytest.mark.skipif(
    "connection.vendor != 'postgresql'", reason="siblings run on threads on PostgreSQL only"
)

MANAGE = Path(__file__).resolve().parents[3] / "manage.py"
#: A killed process's lease lapses soon (a busy machine's heartbeat still keeps it while the
#: process lives), and a takeover waits out its effect window quickly (ledger.engine.fence).
SHORT_LEASE = {"RUNLEDGER_LEASE_SECONDS": "1", "RUNLEDGER_EFFECT_MARGIN_SECONDS": "0.1"}


def wait_for_lapse(run_id: str) -> None:
    """Until the killed process's lease has expired, so that another may claim the run."""
    assert wait_for(lambda: _lease_lapsed(run_id), timeout=60), f"{run_id}: the lease never lapsed"


RUN_ID = "run_fanout_fixed"
AGENT = "fanout-test"


def steps(run_id: str) -> dict[str, Step]:
    return {s.step_id: s for s in Step.objects.filter(run_id=run_id).order_by("seq")}


def threaded() -> bool:
    return connection.vendor == "postgresql"


def fail_and_resume(run_id: str) -> None:
    Run.objects.filter(pk=run_id).update(status="failed")
    transitions.run_resume(by="test", reason="resume", seen_version=None, run_id=run_id)


class Fanout:
    """A test agent: a read before, a fan-out of effects and reads, a read after.

    ``calls`` counts each tool's executions per key; the crash points ``fanout.<key>`` and
    ``fanout.<key>.after_effect`` (armed with ``crash_at``) make a sibling's process "die";
    ``fail`` makes a sibling raise or answer oddly; ``together`` makes the siblings wait for
    each other inside their tools, which only concurrent siblings can pass.
    """

    def __init__(self, keys: list[str], *, max_workers: int = 4) -> None:
        self.keys = list(keys)
        self.max_workers = max_workers
        self.calls: Counter[str] = Counter()
        self.fail: dict[str, Callable[[], Any]] = {}
        self.inputs: dict[str, int] = {}
        self.barrier: threading.Barrier | None = None
        self.pids: dict[str, int] = {}
        self.lock = threading.Lock()

    def together(self, parties: int) -> None:
        self.barrier = threading.Barrier(parties, timeout=120)  # generous: a loaded machine

    def register(self) -> None:
        fan = self

        @tool(kind="read", name="fo-before")
        def before(n: int) -> int:
            return n

        @tool(kind="effect", name="fo-pay", reconcile=simulators.provider_lookup)
        def pay(key: str, amount: int, *, idempotency_key: str) -> dict[str, Any]:
            fan.enter(key)
            if key in fan.fail:
                return fan.fail[key]()
            charge = simulators.provider_charge(
                customer=f"cus_{key}", amount_cents=amount, idempotency_key=idempotency_key
            )
            faults.point(f"fanout.{key}.after_effect")
            return charge

        @tool(kind="read", name="fo-read", retries=0)
        def read(key: str, n: int) -> Any:
            fan.enter(key)
            if key in fan.fail:
                return fan.fail[key]()
            return {"key": key, "n": n}

        @agent(AGENT, divergence="refuse", tools=[before, pay, read])
        def body(ctx, inputs):
            ctx.call(before, step="before", n=1)
            branches = {
                k: (pay, {"key": k, "amount": 100 + fan.inputs.get(k, 0)})
                if k.startswith("pay")
                else (read, {"key": k, "n": fan.inputs.get(k, 0)})
                for k in fan.keys
            }
            results = ctx.parallel(branches, step="fan", max_workers=fan.max_workers)
            ctx.call(before, step="after", n=2)
            return {"order": list(results), "results": results}

    def enter(self, key: str) -> None:
        with self.lock:
            self.calls[key] += 1
        if connection.vendor == "postgresql":
            with connection.cursor() as cur:
                cur.execute("SELECT pg_backend_pid()")
                self.pids[key] = cur.fetchone()[0]
        if self.barrier is not None:
            self.barrier.wait()
        faults.point(f"fanout.{key}")


@pytest.fixture
def fanout() -> Iterator[Callable[..., Fanout]]:
    def make(keys: list[str], **kwargs: Any) -> Fanout:
        fan = Fanout(keys, **kwargs)
        fan.register()
        return fan

    yield make
    registry.unregister_agent(AGENT)


def start(run_id: str = RUN_ID) -> Run:
    return transitions.run_start(agent=AGENT, inputs={}, run_id=run_id)


def wipe() -> None:
    Step.objects.all().delete()
    Run.objects.all().delete()
    ProviderCharge.objects.all().delete()
    OutboxMessage.objects.all().delete()


# --- the shape of a fan-out in the ledger -------------------------------------------------


@pg_only
def test_siblings_run_at_once_each_on_its_own_connection_and_chain_in_key_order(
    fanout, execute
) -> None:
    fan = fanout(["read_c", "pay_a", "read_b"])
    fan.together(3)  # passes only if the three tools run at the same time
    outcome = execute(start().run_id)
    assert outcome.status == "succeeded"
    assert outcome.result["order"] == ["read_c", "pay_a", "read_b"]  # the caller's order
    assert outcome.result["results"]["pay_a"]["customer"] == "cus_pay_a"
    rows = steps(RUN_ID)
    assert list(rows) == ["before", "fan.pay_a", "fan.read_b", "fan.read_c", "after"]
    assert [r.seq for r in rows.values()] == [1, 2, 3, 4, 5]
    assert [r.next_step_id for r in rows.values()] == [*list(rows)[1:], None]
    assert all(r.status == "succeeded" and r.attempt == 1 for r in rows.values())
    assert rows["fan.pay_a"].effect_key == f"{RUN_ID}:fan.pay_a"
    # Three connections at once (the barrier holds them together). With the pool on, one may
    # be the connection the agent's thread gave back after its step: it holds none meanwhile.
    assert len(set(fan.pids.values())) == 3
    assert ProviderCharge.objects.count() == 1

    # Each sibling's thread gave its connection up when it finished: closed, or with the pool
    # on (ledger.engine.pooling) back in the pool, idle, for the next step of any run (this
    # check may itself run on one of them).
    pooled = pooling.pooled()

    def siblings_gone() -> bool:
        with connection.cursor() as cur:
            cur.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE pid = ANY(%s)"
                + (" AND state <> 'idle' AND pid <> pg_backend_pid()" if pooled else ""),
                [list(fan.pids.values())],
            )
            return cur.fetchone()[0] == 0

    assert wait_for(siblings_gone, timeout=60), "a sibling's database connection was left open"


@both
def test_a_resumed_fanout_replays_every_sibling_without_calling_or_rewriting_it(
    fanout, execute
) -> None:
    fan = fanout(["pay_a", "read_b", "read_c"])
    first = execute(start().run_id)
    before = {s.step_id: (s.version, s.updated_at) for s in Step.objects.filter(run_id=RUN_ID)}
    fan.keys.reverse()  # declared in another order: the chain is by key, so it replays the same
    fail_and_resume(RUN_ID)
    second = execute(RUN_ID)
    assert second.status == "succeeded"
    assert (second.replayed, second.executed) == (5, 0)
    assert second.result["results"] == first.result["results"]
    assert fan.calls == Counter({"pay_a": 1, "read_b": 1, "read_c": 1})
    after = {s.step_id: (s.version, s.updated_at) for s in Step.objects.filter(run_id=RUN_ID)}
    assert after == before
    assert ProviderCharge.objects.count() == 1


# --- crashes: only the unfinished siblings run again ---------------------------------------


@both
def test_a_sibling_killed_mid_effect_is_reconciled_and_finished_siblings_are_not_rerun(
    fanout, execute, crash_at
) -> None:
    keys = ["pay_a", "pay_b", "read_c"]
    fan = fanout(keys)
    baseline = execute(start().run_id).result
    wipe()
    fan = fanout(keys)
    if threaded():
        fan.together(3)  # all three are running when pay_b's process "dies"
    crash_at("fanout.pay_b.after_effect")  # the provider took it; the success was not written
    execute(start().run_id, crash_expected=True)
    rows = steps(RUN_ID)
    assert rows["fan.pay_a"].status == "succeeded"
    assert (rows["fan.pay_b"].status, rows["fan.pay_b"].effect_key) == (
        "started",
        f"{RUN_ID}:fan.pay_b",
    )
    assert ("fan.read_c" in rows) == threaded()  # serially, nothing after the crash ran
    assert "after" not in rows
    fan.barrier = None
    outcome = execute(RUN_ID, worker="worker-2")
    assert outcome.status == "succeeded"
    assert outcome.result == baseline
    assert fan.calls == Counter({"pay_a": 1, "pay_b": 1, "read_c": 1})  # none ran twice
    rows = steps(RUN_ID)
    assert rows["fan.pay_b"].attempt == 1  # settled by the provider's lookup, not re-sent
    assert Counter(ProviderCharge.objects.values_list("customer", flat=True)) == Counter(
        {"cus_pay_a": 1, "cus_pay_b": 1}
    )
    assert [r.next_step_id for r in rows.values()] == [*list(rows)[1:], None]


@pg_only
def test_a_fanout_opening_the_run_resumes_when_a_later_sibling_committed_first(
    fanout, execute, crash_at
) -> None:
    """The recorded first row is then not the chain's first: that is no divergence."""
    fan = fanout(["read_a", "read_b"])
    fan.together(2)
    crash_at("fanout.read_a")

    @tool(kind="read", name="fo-first-read", retries=0)
    def read(key: str) -> Any:
        fan.enter(key)
        return key

    @agent(AGENT, divergence="refuse", tools=[read])
    def body(ctx, inputs):
        return ctx.parallel({k: (read, {"key": k}) for k in fan.keys}, step="fan")

    execute(start().run_id, crash_expected=True)
    assert list(steps(RUN_ID)) == ["fan.read_b"]
    fan.barrier = None
    outcome = execute(RUN_ID, worker="worker-2")
    assert outcome.status == "succeeded", outcome.detail
    assert outcome.result == {"read_a": "read_a", "read_b": "read_b"}
    assert fan.calls == Counter({"read_a": 2, "read_b": 1})
    assert steps(RUN_ID)["fan.read_a"].next_step_id == "fan.read_b"


@pg_only
@pytest.mark.slow
@pytest.mark.parametrize(
    ("max_workers", "kill_at"), [(1, "charge.after_effect@2"), (3, "charge.after_effect")]
)
def test_a_real_process_killed_during_a_fanout_resumes_with_every_refund_once(
    max_workers, kill_at, settings
) -> None:
    """SIGKILL of a worker process inside ``batch_refund``'s refund fan-out.

    One worker at a time (deterministic): the first refund is committed, the second was taken
    by the provider, the third never started. Three at once: whatever had committed when the
    process died replays, the rest runs, and each invoice is refunded once either way.
    """
    invoices = ["inv_1003", "inv_1001", "inv_1002"]
    inputs = {"invoice_ids": invoices, "max_workers": max_workers}
    run_id = f"run_fanout_kill_{max_workers}"
    baseline = _uninterrupted(inputs, run_id)  # same run id: same effect keys and charge ids
    transitions.run_start(agent="batch_refund", inputs=inputs, run_id=run_id)
    done = subprocess.run(
        [sys.executable, str(MANAGE), "example_execute", run_id],
        env={
            **os.environ,
            **EQUIPMENT_ENV,
            "DATABASE_URL": _database_url(),
            "RUNLEDGER_KILL_AT": kill_at,
            **SHORT_LEASE,
        },
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == -signal.SIGKILL, done.stderr[-2000:]
    killed = steps(run_id)
    assert all(killed[f"fetch.{i}"].status == "succeeded" for i in invoices)
    if max_workers == 1:
        assert killed["refund.inv_1001"].status == "succeeded"
        assert killed["refund.inv_1002"].status == "started"
        assert "refund.inv_1003" not in killed
    assert ProviderCharge.objects.count() in (1, 2, 3)
    wait_for_lapse(run_id)  # the dead worker's lease lapses, as the sweep would find it
    settings.RUNLEDGER_EFFECT_MARGIN_SECONDS = 0.1  # the takeover waits out its effect window
    outcome = execute.run_execute(run_id=run_id, worker="worker-2", clock=timezone.now)
    assert outcome is not None and outcome.status == "succeeded", outcome
    assert outcome.result == baseline
    resumed = steps(run_id)
    for step_id, row in killed.items():  # what had finished was replayed, not executed again
        if row.status == "succeeded":
            was = (row.attempt, row.started_at, row.finished_at, row.result)
            now = resumed[step_id]
            assert (now.attempt, now.started_at, now.finished_at, now.result) == was, step_id
    assert all(r.status == "succeeded" for r in resumed.values())
    if max_workers == 1:  # the started refund was settled by the provider's lookup
        assert all(r.attempt == 1 for r in resumed.values())
    keys = Counter(ProviderCharge.objects.values_list("idempotency_key", flat=True))
    assert keys == Counter({f"{run_id}:refund.{i}": 1 for i in invoices})
    assert OutboxMessage.objects.filter(message_id=f"{run_id}:summary").count() == 1


def _lease_lapsed(run_id: str) -> bool:
    expires = Run.objects.values_list("lease_expires_at", flat=True).get(pk=run_id)
    return expires is None or expires < timezone.now()


def _sqlite_lease_lapsed(db: sqlite3.Connection, run_id: str) -> bool:
    """The lease's expiry as the worker process stored it (UTC text) has passed."""
    (expires,) = db.execute(
        "SELECT lease_expires_at FROM ledger_run WHERE run_id = ?", [run_id]
    ).fetchone()
    if expires is None:
        return True
    stored = datetime.fromisoformat(expires)
    return (stored if stored.tzinfo else stored.replace(tzinfo=UTC)) < timezone.now()


def _uninterrupted(inputs: dict[str, Any], run_id: str) -> dict[str, Any]:
    """The same batch without a kill, then every row and effect cleared away."""
    transitions.run_start(agent="batch_refund", inputs=inputs, run_id=run_id)
    outcome = execute.run_execute(run_id=run_id, worker="w", clock=timezone.now, heartbeat=False)
    assert outcome is not None and outcome.status == "succeeded"
    wipe()
    return dict(outcome.result)


def _database_url() -> str:
    s = connection.settings_dict
    auth = s["USER"] + (f":{s['PASSWORD']}" if s.get("PASSWORD") else "")
    return f"postgres://{auth}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}/{s['NAME']}"


# --- failures: partial progress holds ------------------------------------------------------


class Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("this exception cannot be printed")


@both
def test_siblings_failing_with_huge_or_odd_errors_leave_the_finished_ones_alone(
    fanout, execute
) -> None:
    """The Step Functions trap: a failure that is not a clean crash (a multi-megabyte error
    with NUL bytes and a lone surrogate, an error that cannot be printed, a result that is not
    JSON) must not make the succeeded siblings run again."""
    fan = fanout(["pay_a", "read_huge", "read_nul", "read_unprintable", "read_weird", "read_z"])
    huge = "x" * 3_000_000 + "\x00 NUL \ud800 surrogate"

    def raise_huge() -> Any:
        raise ValueError(huge)

    def raise_nul() -> Any:
        raise ValueError("bad \x00 byte and a lone \udc80 surrogate")

    def raise_unprintable() -> Any:
        raise Unprintable()

    fan.fail.update(
        read_huge=raise_huge,
        read_nul=raise_nul,
        read_unprintable=raise_unprintable,
        read_weird=lambda: {"bad\x00key": object()},  # not JSON, and the path holds a NUL
    )
    outcome = execute(start().run_id)
    assert outcome.status == "failed"
    assert "fan.read_huge" in outcome.detail and len(outcome.detail) < 20_000
    rows = steps(RUN_ID)
    assert rows["fan.pay_a"].status == rows["fan.read_z"].status == "succeeded"
    huge_row = rows["fan.read_huge"]
    assert huge_row.status == "failed" and len(huge_row.error) < 11_000
    assert huge_row.error.endswith(" characters, cut]")
    assert huge_row.errors[0]["error"].startswith("ValueError: xxx")
    assert rows["fan.read_nul"].error == "ValueError: bad \\x00 byte and a lone \\udc80 surrogate"
    assert "could not be read" in rows["fan.read_unprintable"].error
    assert rows["fan.read_weird"].error.endswith(
        "$.bad\\x00key: contains \\u0000, which PostgreSQL's jsonb rejects"
    )
    assert ProviderCharge.objects.count() == 1

    fan.fail.clear()  # the downstream systems recover; an operator retries the run
    transitions.run_resume(by="test", reason="resume", seen_version=None, run_id=RUN_ID)
    outcome = execute(RUN_ID)
    assert outcome.status == "succeeded", outcome.detail
    assert fan.calls == Counter(
        {
            "pay_a": 1,
            "read_z": 1,
            "read_huge": 2,
            "read_nul": 2,
            "read_unprintable": 2,
            "read_weird": 2,
        }
    )
    rows = steps(RUN_ID)
    assert rows["fan.pay_a"].attempt == rows["fan.read_z"].attempt == 1
    assert rows["fan.read_huge"].attempt == 2
    assert ProviderCharge.objects.count() == 1


@both
def test_a_failing_effect_sibling_is_looked_up_before_it_is_sent_again(fanout, execute) -> None:
    fan = fanout(["pay_a", "pay_b"])

    def charge_then_time_out() -> Any:
        simulators.provider_charge(
            customer="cus_pay_b", amount_cents=100, idempotency_key=f"{RUN_ID}:fan.pay_b"
        )
        raise TimeoutError("the provider took it but the answer timed out")

    fan.fail["pay_b"] = charge_then_time_out
    assert execute(start().run_id).status == "failed"
    fan.fail.clear()
    transitions.run_resume(by="test", reason="resume", seen_version=None, run_id=RUN_ID)
    assert execute(RUN_ID).status == "succeeded"
    assert fan.calls == Counter({"pay_a": 1, "pay_b": 1})
    assert ProviderCharge.objects.count() == 2


# --- path checks ---------------------------------------------------------------------------


@both
@pytest.mark.parametrize("policy", ["refuse", "replan"])
def test_a_changed_set_of_siblings_is_a_divergence_under_the_agents_policy(
    fanout, execute, policy
) -> None:
    fan = fanout(["read_a", "read_b", "read_c"])
    definition = registry.get_agent(AGENT)
    assert definition is not None
    object.__setattr__(definition, "divergence", policy)
    execute(start().run_id)
    fail_and_resume(RUN_ID)
    fan.keys[1] = "read_x"  # today's code fans out to a, c, x
    outcome = execute(RUN_ID)
    rows = steps(RUN_ID)
    if policy == "refuse":
        assert (outcome.status, outcome.reason, outcome.step_id) == (
            "needs_attention",
            "divergence",
            "fan.read_c",
        )
        assert "'fan.read_b'" in outcome.detail
        assert "fan.read_x" not in rows
    else:
        assert outcome.status == "succeeded"
        assert rows["fan.read_b"].status == "abandoned"
        chain = ["before", "fan.read_a", "fan.read_c", "fan.read_x", "after"]
        assert [rows[s].next_step_id for s in chain] == [*chain[1:], None]


@both
def test_a_stale_sibling_stops_the_fanout_before_any_sibling_runs(
    fanout, execute, crash_at
) -> None:
    fan = fanout(["read_a", "read_b", "read_c"])
    crash_at("fanout.read_c")  # a and b commit; c dies
    execute(start().run_id, crash_expected=True)
    assert set(steps(RUN_ID)) == {"before", "fan.read_a", "fan.read_b"}
    fan.inputs["read_b"] = 99  # a deploy changed what b is asked
    outcome = execute(RUN_ID, worker="worker-2")
    assert (outcome.status, outcome.reason, outcome.step_id) == (
        "needs_attention",
        "stale",
        "fan.read_b",
    )
    assert fan.calls == Counter({"read_a": 1, "read_b": 1, "read_c": 1})  # c did not run again
    assert "fan.read_c" not in steps(RUN_ID)


@both
def test_the_preview_of_a_fanout_names_each_sibling_and_runs_none(
    fanout, execute, crash_at
) -> None:
    fan = fanout(["read_a", "read_b", "read_c"])
    crash_at("fanout.read_c")
    execute(start().run_id, crash_expected=True)
    calls = Counter(fan.calls)
    preview = preview_resume(run_id=RUN_ID)
    actions = {s.step_id: s.action for s in preview.steps}
    assert actions == {
        "before": "replay",
        "fan.read_a": "replay",
        "fan.read_b": "replay",
        "fan.read_c": "execute",
    }
    assert "after" not in actions and not preview.diverges
    assert fan.calls == calls


@both
def test_a_cancelled_run_sends_no_effect_from_its_fanout(fanout, execute) -> None:
    fan = fanout(["pay_a", "pay_b"], max_workers=1)

    def cancel_then_answer() -> Any:
        transitions.run_cancel(by="test", reason="cancel", seen_version=None, run_id=RUN_ID)
        return {"late": True}

    fan.fail["pay_a"] = cancel_then_answer
    assert execute(start().run_id) is None  # the worker learnt it lost the run
    run = Run.objects.get(pk=RUN_ID)
    assert run.status == "cancelled"
    rows = steps(RUN_ID)
    assert set(rows) == {"before", "fan.pay_a"}
    assert rows["fan.pay_a"].status == "started"  # the late success was refused
    assert fan.calls == Counter({"pay_a": 1})  # pay_b was never sent
    assert ProviderCharge.objects.count() == 0


@both
def test_branches_that_are_not_tool_and_inputs_are_refused_before_anything_runs(execute) -> None:
    @tool(kind="read", name="fo-bad-read")
    def read(n: int) -> int:
        return n

    @agent(AGENT, tools=[read])
    def body(ctx, inputs):
        return ctx.parallel({"a": (read, {"n": 1}), "b": read}, step="fan")

    try:
        outcome = execute(start().run_id)
    finally:
        registry.unregister_agent(AGENT)
    assert outcome.status == "failed"
    assert "branch 'b' must be (tool, {inputs})" in outcome.detail
    assert not Step.objects.filter(run_id=RUN_ID).exists()


@both
@pytest.mark.slow
def test_threaded_siblings_on_the_sqlite_file_default_survive_a_real_sigkill(tmp_path) -> None:
    """The demo's default database is a SQLite file, where siblings do run on threads (each
    with its own connection, writers taking the lock in turn): kill the worker process at the
    third refund, resume it in another process, and every invoice is refunded once."""
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    env.update(EQUIPMENT_ENV, RUNLEDGER_VAR_DIR=str(tmp_path))
    manage = [sys.executable, str(MANAGE)]
    subprocess.run([*manage, "migrate", "-v0"], env=env, check=True, capture_output=True)
    invoices = [f"inv_100{n}" for n in range(1, 7)]
    inputs = json.dumps({"invoice_ids": invoices, "max_workers": 6})
    killed = subprocess.run(
        [*manage, "example_execute", "--new", "batch_refund", "--inputs", inputs],
        env={**env, "RUNLEDGER_KILL_AT": "charge.after_effect@3", **SHORT_LEASE},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    run_id = killed.stdout.split("run_id=", 1)[1].split()[0]
    db = sqlite3.connect(tmp_path / "runledger.sqlite3")
    query = "SELECT step_id, status, attempt, started_at FROM ledger_step WHERE run_id = ?"
    before = {r[0]: r[1:] for r in db.execute(query, [run_id])}
    assert sum(1 for r in before.values() if r[0] == "started") >= 1
    assert wait_for(lambda: _sqlite_lease_lapsed(db, run_id), timeout=60)  # the lease lapses
    resumed = subprocess.run(
        [*manage, "example_execute", run_id],
        env={**env, **SHORT_LEASE},
        capture_output=True,
        text=True,
        check=True,
    )
    assert resumed.stdout.strip().endswith("succeeded"), resumed.stderr[-2000:]
    after = {r[0]: r[1:] for r in db.execute(query, [run_id])}
    assert {r[0] for r in after.values()} == {"succeeded"} and len(after) == 13
    for step_id, row in before.items():
        if row[0] == "succeeded":
            assert after[step_id] == row, step_id  # replayed, not executed again
    charges = db.execute(
        "SELECT idempotency_key, count(*) FROM examples_providercharge GROUP BY idempotency_key"
    ).fetchall()
    assert sorted(charges) == [(f"{run_id}:refund.{i}", 1) for i in invoices]
    db.close()
