"""The kill test: SIGKILL real Celery workers mid-run, recover, and check the seed's two facts.

For every trial a fresh victim worker (its own process group, its own queue) starts a run of an
example agent and is killed — at a named crash point (the pool child alone, or the whole worker
with its parent), or from outside with ``os.killpg`` at a random moment. A separate recovery
worker and Celery beat stay up: the beat's sweep finds the dead worker's expired lease and
re-queues the run, and the recovery worker resumes it from the ledger. Then both assertions:

* the final result equals the uninterrupted run's (after replacing run-id-derived values: the
  run id, the provider's charge id for this run's key, the recorded clock readings), and no step
  that had succeeded at the moment of the kill changed afterwards;
* each effect happened exactly once in the simulators' tables (ProviderCharge, OutboxMessage,
  Notification) — except where the effect has no read path and the crash left it ambiguous:
  then the run must stop as needs_attention/reconciliation and the effect must not repeat;
* a gated effect (the ``payout-gated`` scenario, approved by the harness whenever its run stops
  at the gate) is sent only after its approval was used, with one approval used per effect.

Every trial's kill point and kill moment come from ``random.Random(f"{seed}:{index}")``, printed
with each failure, so ``RUNLEDGER_HARNESS=1 manage.py killtest --seed S --only I`` replays the
same plan.
"""

from __future__ import annotations

import json
import random
import signal
import statistics
import subprocess
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from itertools import zip_longest
from pathlib import Path
from typing import Any

from harness.cluster import Cluster
from harness.proxy import PHASES, Cut, Proxy
from harness.unannounced import start_unannounced
from ledger import registry, signals, transitions
from ledger.examples.models import Notification, OutboxMessage, ProviderCharge
from ledger.models import FINAL_STATUSES, Gate, GateStatus, Reason, Run, RunStatus, Step, StepStatus
from ledger.processes import execute
from runs.operations.tasks import resume_run, start_run

DONE = (*FINAL_STATUSES, RunStatus.NEEDS_ATTENTION)
# Plus the lease. A kill is recovered within one lease and one sweep; the rest is room for a
# loaded machine (a trial that finishes early ends its wait early).
TRIAL_TIMEOUT = 120.0


@dataclass(frozen=True)
class Scenario:
    name: str
    agent: str
    inputs: dict[str, Any]
    points: tuple[str, ...]  # the crash points this run passes, in order
    effects: int = 1  # effect steps it executes (each has two commits a cut can hit)
    #: Batched durability: the steps ahead of the effect, every one of which must be committed
    #: when a worker dies (or freezes) inside the effect's tool.
    durable_before_effect: int = 0
    #: Its effect waits at an approval gate: the harness approves it (as a person would) each
    #: time the run stops there, and judges that the effect was never sent without it.
    gated: bool = False


SCENARIOS = (
    Scenario(
        "refund-approved",
        "refund",
        {"invoice_id": "inv_1001"},
        (
            "fetch_invoice",
            "decide",
            "charge.before_effect",
            "charge.after_effect",
            "email.before_effect",
            "email.after_effect",
            "notify.before_effect",
            "notify.after_effect",
            "task.after_execute",
        ),
        effects=3,
    ),
    # The refund as an async agent (issue 31): the same steps awaited on the worker's event
    # loop, its charge an async effect with an async lookup, the model's acomplete.
    Scenario(
        "refund-async",
        "refund_async",
        {"invoice_id": "inv_1003"},
        (
            "decide",
            "charge.before_effect",
            "charge.after_effect",
            "notify.before_effect",
            "task.after_execute",
        ),
        effects=3,
    ),
    Scenario(
        "refund-denied",
        "refund",
        {"invoice_id": "inv_1002"},
        (
            "fetch_invoice",
            "decide",
            "notify.before_effect",
            "notify.after_effect",
            "task.after_execute",
        ),
    ),
    Scenario(
        "survey",
        "survey",
        {"records": 40},
        (
            "lookup_record",
            "summarize",
            "email.before_effect",
            "email.after_effect",
            "task.after_execute",
        ),
    ),
    # The survey under batched durability (batch_steps=16): killed before anything committed,
    # mid-way (16 steps committed, 9 waiting), inside a batched model step, and inside the
    # report's effect, when all 44 reads and summaries must have been committed with its intent.
    Scenario(
        "survey-batched",
        "survey_batched",
        {"records": 40},
        (
            "lookup_record@3",
            "lookup_record@25",
            "summarize@3",
            "email.before_effect",
            "email.after_effect",
            "task.after_execute",
        ),
        durable_before_effect=44,
    ),
    # A payout behind an approval gate (the harness approves it when the run stops there):
    # killed after the outcome "stopped at the gate" committed, right after the approval was
    # used with the intent (nothing sent yet), and inside the approved effect, before and after
    # the provider took the charge. The charge happens once, and never without its approval.
    Scenario(
        "payout-gated",
        "payout",
        {"invoice_id": "inv_1005"},
        (
            "task.after_execute",
            "gate.after_use",
            "charge.before_effect",
            "charge.after_effect",
        ),
        gated=True,
    ),
)
MODES = ("child", "group")  # how a crash point kills: the pool child alone, or the whole worker
STOP_MODES = ("stop-child", "stop-group")  # SIGSTOP at a crash point; SIGCONT once recovered
#: The fault families a plan mixes: SIGKILL (at crash points or from outside), SIGSTOP zombies,
#: and database connection cuts (at an effect's commits, or at a random moment).
FAULTS = ("kill", "stop", "cut")
FAULT_OF_MODE = {"child": "kill", "group": "kill", "external": "kill", "stop-child": "stop",
                 "stop-group": "stop", "cut": "cut", "cut-random": "cut"}  # fmt: skip
#: What the proxy looks for: an effect's intent write, and an effect's result write.
COMMITS = {
    "intent": (b"INSERT INTO ledger_step", b"'started'"),
    "result": (b"UPDATE ledger_step SET status = 'succeeded'",),
}
WAKE_TIMEOUT = 30.0  # a woken zombie finishes its task (refused, or its effect sent) by then


@dataclass
class Baseline:
    run_id: str
    result: Any
    duration: float
    charges: int
    emails: int
    notifications: list[str]  # normalized texts


@dataclass
class Trial:
    index: int
    seed: str
    scenario: Scenario
    mode: str  # child | group | external | stop-child | stop-group | cut | cut-random
    # A crash point; "random" for an external kill or cut; for a cut at a commit,
    # "<intent|result><n>.<before|during|after>" (the n-th effect's first or second commit).
    point: str
    # External kills: when, as a fraction of 1.5 times the uninterrupted run's duration, after
    # the run is first seen running (so most land inside the run, some just after it).
    delay: float = 0.0
    run_id: str = ""
    proc: subprocess.Popen[bytes] | None = None
    mark: Path | None = None
    running_at: float | None = None
    killed_at: float | None = None  # when the fault happened (kill, stop or cut)
    woken_at: float | None = None  # a stopped worker: when it got SIGCONT
    proxy: Proxy | None = None
    done_at_kill: bool = False
    snapshot: dict[str, Any] = field(default_factory=dict)
    recovery: float | None = None
    problems: list[str] = field(default_factory=list)
    kinds: set[str] = field(default_factory=set)  # mismatch|duplicate|lost|blocked|stuck

    @property
    def fault(self) -> str:
        return FAULT_OF_MODE[self.mode]

    def describe(self) -> str:
        return (
            f"trial {self.index} seed={self.seed} scenario={self.scenario.name} mode={self.mode} "
            f"point={self.point} delay={self.delay:.3f} run={self.run_id}"
        )


@dataclass
class Report:
    trials: list[Trial]
    seed: int
    elapsed: float

    def count(self, kind: str) -> int:
        return sum(1 for t in self.trials if kind in t.kinds)

    def faulted(self, fault: str | None = None) -> int:
        """Trials whose fault happened (of one family, or all)."""
        return sum(
            1
            for t in self.trials
            if t.killed_at is not None and (fault is None or t.fault == fault)
        )

    @property
    def kills(self) -> int:
        return self.faulted("kill")

    @property
    def failures(self) -> list[Trial]:
        return [t for t in self.trials if t.problems]

    @property
    def recoveries(self) -> list[float]:
        return [t.recovery for t in self.trials if t.recovery is not None]

    def recovery_line(self) -> str:
        times = sorted(self.recoveries)
        if not times:
            return "killtest: recovery: no interrupted runs"
        return (
            f"killtest: recovery from kill to resumed completion over {len(times)} interrupted "
            f"runs: median {statistics.median(times):.2f}s, "
            f"p90 {times[int(0.9 * (len(times) - 1))]:.2f}s, max {times[-1]:.2f}s"
        )

    def summary_line(self) -> str:
        return (
            f"killtest: trials={len(self.trials)} kills={self.kills} "
            f"result_mismatches={self.count('mismatch')} "
            f"duplicated_effects={self.count('duplicate')} lost_effects={self.count('lost')} "
            f"blocked_for_settlement={self.count('blocked')} stuck={self.count('stuck')}"
        )

    def soak_line(self) -> str:
        return (
            f"soak: trials={len(self.trials)} kills={self.kills} stops={self.faulted('stop')} "
            f"cuts={self.faulted('cut')} result_mismatches={self.count('mismatch')} "
            f"duplicated_effects={self.count('duplicate')} lost_effects={self.count('lost')} "
            f"stuck={self.count('stuck')}"
        )


# --- the plan ------------------------------------------------------------------------------


def commit_points(scenario: Scenario) -> list[str]:
    """Each commit of each effect, each phase of a cut: ``intent1.before`` … ``result3.after``."""
    return [
        f"{commit}{n}.{phase}"
        for n in range(1, scenario.effects + 1)
        for commit in COMMITS
        for phase in PHASES
    ]


def _fixed(fault: str) -> list[tuple[Scenario, str, str]]:
    """The trials a fault family must cover: (scenario, mode, point)."""
    if fault == "cut":
        return [(s, "cut", p) for s in SCENARIOS for p in commit_points(s)]
    modes = MODES if fault == "kill" else STOP_MODES
    pairs = [(s, p) for s in SCENARIOS for p in s.points]
    return [(s, modes[i % 2], p) for i, (s, p) in enumerate(pairs)]


def _random(fault: str, rng: random.Random, n: int) -> tuple[Scenario, str, str]:
    scenario = rng.choice(SCENARIOS)
    if fault == "kill":
        if n % 3 == 0:
            return scenario, "external", "random"
        return scenario, rng.choice(MODES), rng.choice(scenario.points)
    if fault == "stop":
        return scenario, rng.choice(STOP_MODES), rng.choice(scenario.points)
    if n % 2 == 0:
        return scenario, "cut-random", "random"
    return scenario, "cut", rng.choice(commit_points(scenario))


def plan(trials: int, seed: int, faults: tuple[str, ...] = ("kill",)) -> list[Trial]:
    """Every fixed point of every fault family first, then random picks.

    The fixed points: every crash point of every scenario (alternating how it kills, or how it
    freezes), every commit of every effect in each phase of a cut. Families alternate, so a
    short plan covers each. After those, one random pick of a family's trials in three (kill)
    or two (cut) is a fault at a random moment inside the run.
    """
    lists = [_fixed(fault) for fault in faults]
    fixed = [row for group in zip_longest(*lists) for row in group if row is not None]
    out: list[Trial] = []
    for index in range(trials):
        rng = random.Random(f"{seed}:{index}")
        if index < len(fixed):
            scenario, mode, point = fixed[index]
        else:
            n = index - len(fixed)
            fault = faults[n % len(faults)]
            scenario, mode, point = _random(fault, rng, n // len(faults))
        out.append(Trial(index, f"{seed}:{index}", scenario, mode, point, delay=rng.random()))
    return out


def batches(trials: list[Trial], size: int) -> Iterable[list[Trial]]:
    """Groups run at once, each with at most one refund-denied (its notice names no run)."""
    denied = [t for t in trials if t.scenario.name == "refund-denied"]
    others = [t for t in trials if t.scenario.name != "refund-denied"]
    while denied or others:
        group = [denied.pop(0)] if denied else []
        take = size - len(group)
        group += others[:take]
        del others[:take]
        yield sorted(group, key=lambda t: t.index)


# --- normalising run-dependent values ------------------------------------------------------


def _tokens(run_id: str) -> dict[str, str]:
    """Literal values that differ between two identical runs, and what they stand for."""
    tokens = {run_id: "<run>"}
    for key, charge_id in ProviderCharge.objects.filter(
        idempotency_key__startswith=f"{run_id}:"
    ).values_list("idempotency_key", "charge_id"):
        tokens[charge_id] = f"<charge {key.removeprefix(run_id)}>"
    for step_id, value in Step.objects.filter(run_id=run_id, kind="clock").values_list(
        "step_id", "result"
    ):
        if isinstance(value, str):
            tokens[value] = f"<clock {step_id}>"
    return tokens


def _normalize(value: Any, tokens: dict[str, str]) -> str:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    for literal in sorted(tokens, key=len, reverse=True):
        text = text.replace(literal, tokens[literal])
    return text


def _effects(run_id: str, notes: list[str], baseline_notes: list[str]) -> tuple[int, int, int]:
    tokens = _tokens(run_id)
    charges = ProviderCharge.objects.filter(idempotency_key__startswith=f"{run_id}:").count()
    emails = OutboxMessage.objects.filter(message_id__startswith=f"{run_id}:").count()
    mine = [n for n in notes if _normalize(n, tokens) in baseline_notes]
    return charges, emails, len(mine)


def baseline(scenario: Scenario) -> Baseline:
    """The uninterrupted run, executed in this process."""
    before = Notification.objects.order_by("-pk").values_list("pk", flat=True).first() or 0
    run = start_unannounced(agent=scenario.agent, inputs=scenario.inputs)
    started = time.monotonic()
    outcome = execute.run_execute(run_id=run.run_id, worker="killtest-baseline")
    while outcome is not None and outcome.reason == Reason.APPROVAL and scenario.gated:
        approve_gate(run.run_id)
        outcome = execute.run_execute(run_id=run.run_id, worker="killtest-baseline")
    duration = time.monotonic() - started
    if outcome is None or outcome.status != RunStatus.SUCCEEDED:
        raise RuntimeError(f"the uninterrupted {scenario.name} run did not succeed: {outcome}")
    tokens = _tokens(run.run_id)
    notes = Notification.objects.filter(pk__gt=before).values_list("text", flat=True)
    return Baseline(
        run_id=run.run_id,
        result=_normalize(outcome.result, tokens),
        duration=duration,
        charges=ProviderCharge.objects.filter(idempotency_key__startswith=f"{run.run_id}:").count(),
        emails=OutboxMessage.objects.filter(message_id__startswith=f"{run.run_id}:").count(),
        notifications=[_normalize(n, tokens) for n in notes],
    )


# --- approval gates -------------------------------------------------------------------------

APPROVER = "killtest-approver"


def approve_gate(run_id: str) -> bool:
    """Approve the waiting gate of a run stopped at one, as a person would; the resume is not
    announced (the caller sends it where it wants). False when there is none to approve."""
    gate = Gate.objects.filter(run_id=run_id, status=GateStatus.WAITING).order_by("-pk").first()
    if gate is None:
        return False
    with signals.held():
        transitions.gate_approve(gate=gate, by=APPROVER, reason="the kill test approves")
    return True


def _approve_waiting(cluster: Cluster, trial: Trial, status: str) -> str:
    """A gated trial whose run stopped at its gate: approve it and send the resume to the victim
    (still alive) or the recovery worker; the status as it is then."""
    if not trial.scenario.gated or status != RunStatus.NEEDS_ATTENTION:
        return status
    if trial.killed_at is None and trial.point == "task.after_execute":
        return status  # the victim dies right after stopping at the gate: approve after that
    reason = Run.objects.filter(pk=trial.run_id).values_list("reason", flat=True).first()
    if reason != Reason.APPROVAL or not approve_gate(trial.run_id):
        return status
    alive = trial.killed_at is None and trial.proc is not None and trial.proc.poll() is None
    queues = [f"killtest-victim-{trial.index}"] if alive else []
    if not alive or trial.point == "random":
        # A fault at a random moment may take the victim with the message: the recovery worker
        # gets it too (a resume delivered twice is harmless: the lease admits one).
        queues.append(cluster.queue)
    for queue in queues:
        cluster.send(resume_run, trial.run_id, queue=queue)
    return RunStatus.QUEUED


def _check_gates(trial: Trial) -> None:
    """Every charge of a gated run was sent under an approval used before it, and one approval
    was used: never a charge without its approval, never an approval used twice."""
    if not trial.scenario.gated:
        return
    used = list(Gate.objects.filter(run_id=trial.run_id, status=GateStatus.USED))
    charges = list(ProviderCharge.objects.filter(idempotency_key__startswith=f"{trial.run_id}:"))
    if len(used) > 1:
        trial.problems.append(f"{len(used)} approvals were used for one effect")
        trial.kinds.add("duplicate")
    for charge in charges:
        before = [g for g in used if g.used_at is not None and g.used_at <= charge.created_at]
        if not before or not all(g.approved_by for g in before):
            trial.problems.append(f"charge {charge.charge_id} was sent without its approval")
            trial.kinds.add("mismatch")


# --- running a batch -----------------------------------------------------------------------


def _snapshot(run_id: str) -> dict[str, Any]:
    rows = Step.objects.filter(run_id=run_id, status=StepStatus.SUCCEEDED).values_list(
        "step_id", "result"
    )
    return {step_id: result for step_id, result in rows}


def _launch(cluster: Cluster, trial: Trial, root: Path) -> None:
    run = start_unannounced(agent=trial.scenario.agent, inputs=trial.scenario.inputs)
    trial.run_id = run.run_id
    queue = f"killtest-victim-{trial.index}"
    env: dict[str, str] = {}
    if trial.fault == "cut":
        # The victim reaches the database through a proxy of its own; recovery goes direct.
        trial.proxy = Proxy.for_url(cluster.env["DATABASE_URL"])
        env["DATABASE_URL"] = trial.proxy.url(cluster.env["DATABASE_URL"])
        # The simulated provider, outbox and notifier stand for other systems: not behind the cut.
        env["RUNLEDGER_DOWNSTREAM_DATABASE_URL"] = cluster.env["DATABASE_URL"]
        if trial.mode == "cut":
            trial.proxy.arm(commit_cut(trial.point))
            # The proxy finds the n-th intent or result write by its text on the wire; a
            # prepared statement goes by name after its first execution (RUNLEDGER_PG_PREPARE),
            # so the victim of a cue sends its statements whole. Random-moment cuts keep them.
            env["RUNLEDGER_PG_PREPARE"] = "0"
    elif trial.mode != "external":
        trial.mark = root / f"killed-{trial.index}"
        env = {
            "RUNLEDGER_KILL_AT": trial.point,
            "RUNLEDGER_KILL_SCOPE": "group" if trial.mode.endswith("group") else "process",
            "RUNLEDGER_KILL_MARK": str(trial.mark),
        }
        if trial.fault == "stop":
            env["RUNLEDGER_KILL_SIGNAL"] = "STOP"
    trial.proc = cluster.worker(f"victim-{trial.index}", queues=queue, env=env)
    cluster.send(start_run, run.run_id, queue=queue)


def commit_cut(point: str) -> Cut:
    """The proxy's cue for ``<intent|result><n>.<phase>``."""
    name, phase = point.split(".")
    commit = name.rstrip("0123456789")
    nth = int(name.removeprefix(commit))
    return Cut(needles=COMMITS[commit], nth=nth, phase=phase)


def _observe(trial: Trial, status: str, durations: dict[str, float], cluster: Cluster) -> bool:
    """Advance one trial by one poll; True when it is over (the fault happened, the run has
    stopped, and a frozen worker was woken and finished what it was doing)."""
    now = time.time()
    if trial.killed_at is None:
        if trial.point == "random":
            if trial.running_at is None and status != "queued":
                trial.running_at = now
            window = durations[trial.scenario.name] * 1.5
            if trial.running_at is not None and now >= trial.running_at + trial.delay * window:
                _strike(trial)
                _killed(trial, now)
        elif trial.proxy is not None:
            if trial.proxy.fired_at is not None:
                _killed(trial, trial.proxy.fired_at)
        elif trial.mark is not None and trial.mark.exists():
            text = trial.mark.read_text().split()
            if len(text) == 2:
                _killed(trial, float(text[1]))
        return False
    if status not in DONE:
        return False
    if trial.fault != "stop":
        return True
    assert trial.proc is not None
    if trial.woken_at is None:
        # The run was taken over and stopped: now wake the zombie, as a paused VM resumes.
        trial.woken_at = now
        Cluster.kill(trial.proc, signal.SIGCONT)
        return False
    finished = f"of run {trial.run_id}:" in cluster.log(f"victim-{trial.index}", tail=400)
    if not finished and now - trial.woken_at > WAKE_TIMEOUT:
        trial.problems.append(f"the woken worker did not finish its task in {WAKE_TIMEOUT}s")
        trial.kinds.add("stuck")
        return True
    return finished


def _strike(trial: Trial) -> None:
    """A fault at a random moment: SIGKILL the whole worker, or cut its database lines."""
    if trial.proxy is not None:
        trial.proxy.cut_all()
        return
    assert trial.proc is not None
    Cluster.kill(trial.proc)
    trial.proc.wait()


def _killed(trial: Trial, at: float) -> None:
    trial.killed_at = at
    trial.snapshot = _snapshot(trial.run_id)
    status = Run.objects.filter(pk=trial.run_id).values_list("status", flat=True).first()
    trial.done_at_kill = status in DONE


def run_batch(
    cluster: Cluster, group: list[Trial], baselines: dict[str, Baseline], root: Path
) -> None:
    durations = {name: b.duration for name, b in baselines.items()}
    first_note = Notification.objects.order_by("-pk").values_list("pk", flat=True).first() or 0
    for trial in group:
        _launch(cluster, trial, root)
    pending = list(group)
    deadline = time.monotonic() + TRIAL_TIMEOUT + cluster.lease_seconds
    while pending and time.monotonic() < deadline:
        statuses = dict(
            Run.objects.filter(pk__in=[t.run_id for t in pending]).values_list("run_id", "status")
        )
        for trial in pending:
            statuses[trial.run_id] = _approve_waiting(cluster, trial, statuses[trial.run_id])
        pending = [t for t in pending if not _observe(t, statuses[t.run_id], durations, cluster)]
        time.sleep(0.002)
    for trial in group:
        if trial.proc is not None:
            Cluster.kill(trial.proc, signal.SIGCONT)
            Cluster.kill(trial.proc)
            trial.proc.wait()
        if trial.proxy is not None:
            trial.proxy.close()
    notes = list(Notification.objects.filter(pk__gt=first_note).values_list("text", flat=True))
    for trial in group:
        _judge(trial, baselines[trial.scenario.name], notes, cluster)


# --- judging a trial -----------------------------------------------------------------------


def _judge(trial: Trial, base: Baseline, notes: list[str], cluster: Cluster) -> None:
    run = Run.objects.get(pk=trial.run_id)
    if trial.killed_at is None:
        trial.problems.append(f"the fault never happened (run is {run.status})")
        trial.kinds.add("mismatch")
        return
    if run.status not in DONE:
        trial.problems.append(f"the run did not recover in time: it is {run.status}")
        trial.kinds.add("stuck")
    elif not trial.done_at_kill:
        trial.recovery = (run.status_changed_at.timestamp()) - trial.killed_at
    _check_durable_before_effect(trial)
    _check_gates(trial)
    final = _snapshot(trial.run_id)
    changed = [s for s, r in trial.snapshot.items() if final.get(s, "<missing>") != r]
    if changed:
        trial.problems.append(f"steps that had succeeded before the kill changed: {changed}")
        trial.kinds.add("mismatch")
    charges, emails, notified = _effects(trial.run_id, notes, base.notifications)
    expected = (base.charges, base.emails, len(base.notifications))
    if run.status == RunStatus.SUCCEEDED:
        result = _normalize(run.result, _tokens(trial.run_id))
        if result != base.result:
            trial.problems.append(f"result {result} != uninterrupted {base.result}")
            trial.kinds.add("mismatch")
        _count(trial, (charges, emails, notified), expected)
    elif _blocked_for_settlement(run):
        trial.kinds.add("blocked")
        # Effects before the ambiguous one happened once; the ambiguous one at most once.
        _count(trial, (charges, emails, min(notified, 1)), (*expected[:2], min(notified, 1)))
        if notified > 1:
            trial.problems.append(f"the ambiguous notification was repeated: {notified}")
            trial.kinds.add("duplicate")
    elif run.status in DONE:
        trial.problems.append(f"ended {run.status} {run.reason}: {run.detail or run.error}"[:500])
        trial.kinds.add("mismatch")
    if trial.problems:
        for name in ("recovery", f"victim-{trial.index}"):
            log = cluster.log(name, tail=5000).splitlines()
            lines = [line for line in log if trial.run_id in line] or log[-15:]
            trial.problems.append(f"{name} on this run:\n      " + "\n      ".join(lines[-10:]))


def _check_durable_before_effect(trial: Trial) -> None:
    """Batched durability's invariant: a worker that died inside an effect's tool had
    committed every step ahead of that effect (the snapshot is the ledger at the kill)."""
    want = trial.scenario.durable_before_effect
    inside = trial.point.endswith(("before_effect", "after_effect"))
    if want and inside and trial.fault in ("kill", "stop") and len(trial.snapshot) < want:
        trial.problems.append(
            f"the effect was being sent with {len(trial.snapshot)} of the {want} steps ahead of "
            "it committed"
        )
        trial.kinds.add("mismatch")


def _count(trial: Trial, actual: tuple[int, int, int], expected: tuple[int, int, int]) -> None:
    for name, got, want in zip(
        ("charges", "emails", "notifications"), actual, expected, strict=True
    ):
        if got > want:
            trial.problems.append(f"{name}: {got} happened, {want} expected (duplicated)")
            trial.kinds.add("duplicate")
        elif got < want:
            trial.problems.append(f"{name}: {got} happened, {want} expected (lost)")
            trial.kinds.add("lost")


def _blocked_for_settlement(run: Run) -> bool:
    """Stopped at an effect that has no read path, which is the only honest answer there."""
    if run.status != "needs_attention" or run.reason != "reconciliation":
        return False
    step = Step.objects.filter(run_id=run.run_id, step_id=run.blocked_step_id).first()
    tool = registry.get_tool(step.tool) if step is not None else None
    return (
        step is not None and step.kind == "effect" and tool is not None and tool.reconcile is None
    )


# --- the whole test ------------------------------------------------------------------------


def run(
    *,
    trials: int,
    seed: int,
    root: Path,
    parallel: int = 4,
    only: int | None = None,
    lease_seconds: float = 2.0,
    sweep_seconds: float = 0.5,
    progress: Callable[[str], None] | None = None,
    faults: tuple[str, ...] = ("kill",),
    broker_url: str = "filesystem://localhost//",
    budget_seconds: float | None = None,
    chosen: list[Trial] | None = None,
) -> Report:
    """Run the kill test against the database this process is connected to.

    ``faults`` picks the families mixed (``FAULTS``), or ``chosen`` gives the trials outright;
    ``budget_seconds`` bounds the wall time: no batch starts after it, and the report holds
    the trials that ran.
    """
    started = time.monotonic()
    if chosen is None:
        chosen = plan(max(trials, (only or 0) + 1), seed, faults)
    if only is not None:
        chosen = [t for t in chosen if t.index == only]
    baselines = {scenario.name: baseline(scenario) for scenario in SCENARIOS}
    done: list[Trial] = []
    # Recovery here is by expired lease only: a run that waits in a victim's queue while the
    # victim starts on a busy machine must not be handed to the recovery worker as "lost".
    lost_after = TRIAL_TIMEOUT + lease_seconds
    with Cluster(
        root,
        lease_seconds=lease_seconds,
        sweep_seconds=sweep_seconds,
        lost_after=lost_after,
        broker_url=broker_url,
    ) as cluster:
        cluster.beat("beat")
        cluster.worker("recovery", concurrency=2)
        for number, group in enumerate(batches(chosen, parallel)):
            if budget_seconds is not None and time.monotonic() - started > budget_seconds:
                break
            run_batch(cluster, group, baselines, root)
            done += group
            if progress is not None:
                failed = sum(1 for t in group if t.problems)
                progress(f"killtest: batch {number + 1}: {len(group)} trials, {failed} failed")
    done.sort(key=lambda t: t.index)
    return Report(trials=done, seed=seed, elapsed=time.monotonic() - started)
