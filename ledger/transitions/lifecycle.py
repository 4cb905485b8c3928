"""A run's life as the workers drive it: created, claimed, renewed, counted, finished, blocked,
continued, re-queued by the sweep. Each function is one compare-and-set on the run row whose
row count is checked; writes made while a worker executes the agent carry its lease token, so a
worker whose lease was taken (or whose run was cancelled) changes nothing and gets ``LeaseLost``.

Every change of a run's state bumps ``Run.version`` (a heartbeat does not), which operator
actions compare with the version a person saw.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db import IntegrityError, connection, transaction
from django.db.models import F, Q, QuerySet, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from ledger import canonical, pacing, registry, signals
from ledger.conf import conf
from ledger.errors import (
    ApprovalRequired,
    Conflict,
    InvalidInput,
    LeaseLost,
    QuestionAsked,
    RunBlocked,
)
from ledger.inputs import check_run_id
from ledger.models import (
    ACTIVE_STATUSES,
    AuditAction,
    AuditEvent,
    Beacon,
    Execution,
    ExecutionEnding,
    Run,
    RunStatus,
    WebhookSubscription,
)
from ledger.registry import LABEL_CHARS, TITLE_CHARS
from ledger.selectors import ExpiredLease
from ledger.teams import check_team, default_team
from ledger.transitions import events, gates, notify
from ledger.transitions import pacing as paced_claims
from ledger.transitions._common import (
    TAKEN_LEASE,
    Actor,
    LockRefused,
    actor_name,
    audit_event,
    bounded_lock_wait,
    stop_cause,
)

log = logging.getLogger(__name__)

MAX_IDEMPOTENCY_KEY_CHARS = 200
MAX_LABELS = 20

Clock = Callable[[], datetime]

#: The fields that release a run's lease (finish, block, cancel, re-queue).
_RELEASED: dict[str, Any] = {"lease_token": None, "lease_owner": "", "lease_expires_at": None}


def run_start(
    *,
    agent: str,
    inputs: Any,
    run_id: str | None = None,
    max_resumes: int | None = None,
    clock: Clock = timezone.now,
    parent: Run | None = None,
    parent_kind: str = "",
    forked_from_step_id: str = "",
    by: Actor | None = None,
    reason: str = "",
    idempotency_key: str | None = None,
    title: str | None = None,
    labels: dict[str, str] | None = None,
    team: str | None = None,
) -> Run:
    """Create a queued run of a registered agent. Inputs must be JSON and hold what the agent
    ``requires``; a chosen ``run_id`` must match ``ledger.inputs.RUN_ID_PATTERN``
    (``InvalidInput`` otherwise: nothing is written). The run's title is made from the inputs
    by the agent's declaration unless given; its labels are the declared ones made from the
    inputs, with ``labels`` added (the given value wins on the same key).

    ``parent``/``parent_kind`` record lineage (``"continue"`` for a continuation, ``"fork"``).
    ``by``: the person who started it (a command's ``cli:<login>``, a token's ``api:<name>``),
    audited with ``reason``; None for runs the system starts (continuations, and forks, which
    audit themselves).

    A run without a parent is announced after the commit (``signals.run_queued``, cause
    ``start``); a run made from another is announced by the transition that made it. A run
    without a parent records no plan version or tool schema yet: the worker that first executes
    it stamps those from the code it runs (``run_stamp_plan``), so a process on older agent
    code can start a run that a newer worker executes.

    A run id or idempotency key that is taken raises ``IntegrityError``; ``run_start_once`` is
    the idempotent form.
    """
    run = new_run(
        agent=agent,
        inputs=inputs,
        run_id=run_id,
        max_resumes=max_resumes,
        now=clock(),
        parent=parent,
        parent_kind=parent_kind,
        forked_from_step_id=forked_from_step_id,
        idempotency_key=idempotency_key,
        title=title,
        labels=labels,
        team=team,
    )
    _save_new(run, by=by, reason=reason)
    return run


def _save_new(
    run: Run,
    *,
    by: Actor | None,
    reason: str,
    webhooks: list[dict[str, Any]] | None = None,
) -> list[tuple[WebhookSubscription, str]]:
    """Write the new run, its audit row and its per-run subscriptions (checked already, by
    ``events.check_run_webhooks``) in one transaction; the subscriptions with their secrets."""
    with transaction.atomic():
        run.save(force_insert=True)
        subscribed = events.subscribe_run_at_start(run, webhooks or [], by=by) if webhooks else []
        if by is not None:
            start_audit(run, by=by, reason=reason).save(force_insert=True)
        if run.parent_id is None:
            # A delayed start's message waits for its start time, as a back-off's does.
            signals.send_run_queued_on_commit(run_id=run.run_id, cause="start", eta=run.wake_at)
    return subscribed


def start_audit(run: Run, *, by: Actor, reason: str) -> AuditEvent:
    """The audit event of a person's (or a token's) start of ``run``, unsaved."""
    after = {"agent": run.agent, "inputs": run.inputs, "max_resumes": run.max_resumes}
    if run.idempotency_key is not None:
        after["idempotency_key"] = run.idempotency_key
    return audit_event(
        by=actor_name(by),
        action=AuditAction.RUN_START,
        at=run.created_at,
        run_id=run.run_id,
        after=after,
        reason=reason.strip() or "started by hand",
    )


def new_run(
    *,
    agent: str,
    inputs: Any,
    run_id: str | None,
    max_resumes: int | None,
    now: datetime,
    parent: Run | None,
    parent_kind: str,
    forked_from_step_id: str,
    idempotency_key: str | None,
    title: str | None,
    labels: dict[str, str] | None,
    pace: Pace | None = None,
    team: str | None = None,
) -> Run:
    """The unsaved run, every input checked (``InvalidInput``, ``LookupError``). Its team:
    ``team``, else its parent's, else its agent's declared one, else RUNLEDGER_DEFAULT_TEAM."""
    definition = registry.get_agent(agent)
    if definition is None:
        raise LookupError(f"no agent named {agent!r} is registered")
    data = canonical.normalize(inputs, step_id="<run inputs>")
    definition.check_inputs(data)
    budget = max_resumes if max_resumes is not None else definition.max_resumes
    # A run made from another carries a ledger recorded under a plan: it keeps this code's
    # stamp. A new run is stamped by the worker that first executes it.
    stamp = parent is not None
    run = Run(
        agent=agent,
        inputs=data,
        title=check_title(title) if title is not None else definition.title_for(data),
        labels=_labels(definition.labels_for(data), labels),
        idempotency_key=check_idempotency_key(idempotency_key),
        status=RunStatus.QUEUED,
        plan_version=definition.plan_version if stamp else "",
        tool_schema_hash=definition.tool_schema_hash if stamp else "",
        code_version=definition.code_version if stamp else "",
        max_resumes=budget if budget is not None else conf.RUNLEDGER_DEFAULT_MAX_RESUMES,
        created_at=now,
        updated_at=now,
        status_changed_at=now,
        parent=parent,
        parent_kind=parent_kind,
        forked_from_step_id=forked_from_step_id,
    )
    if team is not None:
        run.team = check_team(team)
    elif parent is not None:
        run.team = parent.team
    else:
        run.team = definition.team or default_team()
    if run_id is not None:
        run.run_id = check_run_id(run_id)  # InvalidInput: the documented set only
    (pace or Pace()).apply(run, definition, data)
    return run


@dataclass(frozen=True)
class Pace:
    """A start's flow-control options (``ledger.pacing``), checked when applied to the run."""

    concurrency_key: str | None = None
    concurrency_limit: int | None = None
    priority: int | None = None
    #: Not executed before this time (an aware datetime); queued until then, holding nothing.
    start_at: datetime | None = None
    #: Seconds from the start, or a time: past it the run stops, failed (reason ``deadline``).
    deadline: float | datetime | None = None

    def apply(self, run: Run, definition: registry.Agent, inputs: Any) -> None:
        """Set the run's concurrency key and limit: the start's, else the agent's declared
        ones (the key made from the inputs); a limit without a key is ``InvalidInput``."""
        declared = definition.concurrency
        limit = self.concurrency_limit
        if limit is not None:
            limit = pacing.check_limit(limit)
        if self.concurrency_key is not None:
            run.concurrency_key = pacing.check_key(self.concurrency_key)
        elif declared is not None:
            run.concurrency_key = declared.key_for(inputs)
        elif limit is not None:
            raise InvalidInput("concurrency_limit needs a concurrency_key")
        if run.concurrency_key:
            run.concurrency_limit = limit or (declared.limit if declared is not None else 1)
        if self.priority is not None:
            run.priority = pacing.check_priority(self.priority)
        if self.start_at is not None:
            at = pacing.check_start_at(
                self.start_at, now=run.created_at, max_days=conf.RUNLEDGER_MAX_START_DELAY_DAYS
            )
            if at > run.created_at:
                # Released as a retry's back-off is: claimable from then (``run_woke`` clears it).
                run.wake_at = at
                run.detail = f"waiting to start at {at:%Y-%m-%d %H:%M:%S %Z}"
        deadline = self.deadline if self.deadline is not None else definition.deadline
        if deadline is not None:
            # Seconds count from when the run may start: now, or its start_at.
            run.deadline_at = pacing.check_deadline(deadline, now=run.wake_at or run.created_at)


@dataclass(frozen=True)
class Started:
    """What ``run_start_once`` did: ``created`` is False when the run existed already."""

    run: Run
    created: bool
    #: The per-run subscriptions this start made, each with its secret (shown once); empty on
    #: a repeat (an identical start subscribes nothing again).
    subscriptions: list[tuple[WebhookSubscription, str]] = field(default_factory=list)


def run_start_once(
    *,
    agent: str,
    inputs: Any,
    run_id: str | None = None,
    idempotency_key: str | None = None,
    title: str | None = None,
    labels: dict[str, str] | None = None,
    max_resumes: int | None = None,
    by: Actor | None = None,
    reason: str = "",
    webhooks: list[dict[str, Any]] | None = None,
    pace: Pace | None = None,
    schedule: str = "",
    team: str | None = None,
    clock: Clock = timezone.now,
) -> Started:
    """Start a run, or answer the run an earlier identical start made.

    A run whose id is ``run_id``, or whose idempotency key is ``idempotency_key``, is the same
    start when it is of the same agent with the same canonical inputs (and the same key and id
    where both were given): it is returned as it is, nothing is written (a title or labels
    other than the first start's are not compared, and not applied). Otherwise ``Conflict``
    says what differs and nothing is written. Two identical starts racing make one run (the unique
    constraints decide; the loser reads the winner's row).

    ``webhooks``: per-run subscriptions (``[{"url": …, "events": […]}]``, checked before
    anything is written) made in the run's own transaction; a repeat subscribes nothing again
    (its ``webhooks`` are not compared: the run's subscriptions are those of the first start).
    ``schedule``: the id of the schedule whose tick starts the run (``ledger.schedules``).
    ``team``: the run's team (``ledger.teams``; default: the agent's, else the default team);
    not compared on a repeat.
    """
    specs = events.check_run_webhooks(webhooks)
    candidate = new_run(
        agent=agent,
        inputs=inputs,
        run_id=run_id,
        max_resumes=max_resumes,
        now=clock(),
        parent=None,
        parent_kind="",
        forked_from_step_id="",
        idempotency_key=idempotency_key,
        title=title,
        labels=labels,
        pace=pace,
        team=team,
    )
    candidate.schedule = schedule
    existing = _earlier_start(candidate, chosen_id=run_id)
    if existing is not None:
        return Started(run=existing, created=False)
    try:
        with transaction.atomic():  # a savepoint: a lost race leaves the caller's transaction
            subscribed = _save_new(candidate, by=by, reason=reason, webhooks=specs)
    except IntegrityError:
        existing = _earlier_start(candidate, chosen_id=run_id)
        if existing is None:
            raise
        return Started(run=existing, created=False)
    return Started(run=candidate, created=True, subscriptions=subscribed)


def _earlier_start(candidate: Run, *, chosen_id: str | None) -> Run | None:
    """The run an identical earlier start made, None if there is none; ``Conflict`` when the
    id or the key is taken by a different start."""
    by_id = None
    if chosen_id is not None:
        by_id = Run.objects.filter(pk=candidate.run_id).first()
    by_key = None
    if candidate.idempotency_key is not None:
        by_key = Run.objects.filter(idempotency_key=candidate.idempotency_key).first()
    return same_start(candidate, chosen_id=chosen_id, by_id=by_id, by_key=by_key)


def same_start(
    candidate: Run, *, chosen_id: str | None, by_id: Run | None, by_key: Run | None
) -> Run | None:
    """The conflict rules of a start, given the run holding the candidate's chosen id
    (``by_id``) and the one holding its idempotency key (``by_key``): the run to answer when it
    is the same start, None when neither exists, ``Conflict`` (saying what differs) when the id
    or the key belongs to a different start."""
    found: dict[str, Run] = {}
    if by_id is not None:
        found["run id"] = by_id
    if by_key is not None:
        found["idempotency key"] = by_key
    if not found:
        return None
    runs = {r.run_id: r for r in found.values()}
    if len(runs) > 1:
        raise Conflict(
            f"the run id {candidate.run_id!r} and the idempotency key "
            f"{candidate.idempotency_key!r} belong to two different runs",
            current={"run_ids": sorted(runs)},
        )
    (what, existing), *_ = found.items()
    differences = start_differences(existing, candidate, chosen_id=chosen_id)
    if differences:
        raise Conflict(
            f"the {what} was used by run {existing.run_id} with other values: "
            + "; ".join(differences),
            current={"run_id": existing.run_id, "differs": differences},
        )
    return existing


def start_differences(existing: Run, candidate: Run, *, chosen_id: str | None) -> list[str]:
    """What makes ``candidate`` a different start from ``existing``, in words ([] if none)."""
    out = []
    if existing.agent != candidate.agent:
        out.append(f"agent {existing.agent!r} → {candidate.agent!r}")
    out.extend(canonical_differences(existing.inputs, candidate.inputs, path="inputs"))
    if chosen_id is not None and existing.run_id != candidate.run_id:
        out.append(f"run id {existing.run_id!r} → {candidate.run_id!r}")
    key = candidate.idempotency_key
    if key is not None and existing.idempotency_key not in (None, key):
        out.append(f"idempotency key {existing.idempotency_key!r} → {key!r}")
    return out


def canonical_differences(old: Any, new: Any, *, path: str, limit: int = 10) -> list[str]:
    """Where two JSON values differ, as ``path: old → new`` lines (key order ignored)."""
    if isinstance(old, dict) and isinstance(new, dict):
        out: list[str] = []
        for key in sorted(set(old) | set(new)):
            where = f"{path}.{key}"
            if key not in new:
                out.append(f"{where}: {_shown(old[key])} → absent")
            elif key not in old:
                out.append(f"{where}: absent → {_shown(new[key])}")
            else:
                out.extend(canonical_differences(old[key], new[key], path=where, limit=limit))
            if len(out) >= limit:
                return out[:limit]
        return out
    if canonical.dumps(old) == canonical.dumps(new):
        return []
    return [f"{path}: {_shown(old)} → {_shown(new)}"]


def _shown(value: Any) -> str:
    text = canonical.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."


def check_idempotency_key(key: str | None) -> str | None:
    if key is None:
        return None
    if not isinstance(key, str) or not key.strip() or len(key) > MAX_IDEMPOTENCY_KEY_CHARS:
        raise InvalidInput(
            f"an idempotency key is 1 to {MAX_IDEMPOTENCY_KEY_CHARS} printable characters"
        )
    if not key.isprintable():
        raise InvalidInput("an idempotency key is printable text (no control characters)")
    return key


def check_title(title: str) -> str:
    if not isinstance(title, str) or not title.isprintable():
        raise InvalidInput("a run's title is one line of printable text")
    return " ".join(title.split())[:TITLE_CHARS]


def _labels(declared: dict[str, str], given: dict[str, str] | None) -> dict[str, str]:
    """The run's labels: those the agent declares (made from the inputs), and the start's own
    beside them, which win on the same key."""
    if given is None:
        return declared
    merged = {**declared, **check_labels(given)}
    if len(merged) > MAX_LABELS:
        raise InvalidInput(
            f"labels: at most {MAX_LABELS}, the agent's declared ones ({', '.join(declared)}) "
            "included"
        )
    return merged


def check_labels(labels: dict[str, str]) -> dict[str, str]:
    if not isinstance(labels, dict) or len(labels) > MAX_LABELS:
        raise InvalidInput(f"labels are an object of at most {MAX_LABELS} text values")
    for key, value in labels.items():
        if not (isinstance(key, str) and isinstance(value, str)):
            raise InvalidInput("labels are text keys with text values")
        if not key or len(key) > 100 or len(value) > LABEL_CHARS:
            raise InvalidInput(f"a label key is 1 to 100 characters, its value {LABEL_CHARS}")
        if not (key.isprintable() and value.isprintable()) or ":" in key or " " in key:
            raise InvalidInput(f"label {key[:40]!r}: printable text, no ':' or space in a key")
    return dict(labels)


# --- the lease -----------------------------------------------------------------------------


def lease_claim(
    *,
    run_id: str,
    owner: str,
    seconds: float | None = None,
    clock: Clock = timezone.now,
    ranked: bool = True,
) -> str | None:
    """Claim a queued or running run whose lease is free or expired; return the new token.

    A compare-and-set on the run row: of any number of workers claiming at once, one wins. A
    run released for a retry's back-off is not claimable before its ``wake_at``. The
    expiry of a lease it takes over is kept in ``prior_lease_expires_at``, and ``executions``
    (the fencing token the tools receive) grows by one. The first claim of the run writes
    its ``started_at``; a later one (a resume) keeps it.

    Flow control (``ledger.transitions.pacing``): a queued run that a queued run of higher
    priority outranks is not claimed (unless ``ranked`` is False; ``priority_swap`` claims the
    other instead), and a run with a concurrency key only under its key's limit.
    """
    now = clock()
    token = secrets.token_hex(16)
    ttl = timedelta(seconds=seconds or conf.RUNLEDGER_LEASE_SECONDS)
    claimable = (
        Run.objects.filter(pk=run_id, status__in=ACTIVE_STATUSES)
        .filter(Q(lease_token__isnull=True) | Q(lease_expires_at__lt=now))
        .filter(Q(wake_at__isnull=True) | Q(wake_at__lte=now))
    )
    if ranked:
        claimable = paced_claims.ranked(claimable, now=now)

    def claim(runs: QuerySet[Run]) -> str | None:
        return token if _claimed(runs, owner=owner, token=token, now=now, ttl=ttl) else None

    # A run without a concurrency key is claimed in one statement, as always; only when that
    # refuses is the run read, and a keyed run claimed under its key's limit.
    if claim(claimable.filter(concurrency_key="")) is not None:
        return token
    keyed = Run.objects.filter(pk=run_id).exclude(concurrency_key="")
    found = keyed.values_list("concurrency_key", "concurrency_limit").first()
    if found is None:
        return None
    return paced_claims.keyed_claim(
        run_id=run_id, key=found[0], limit=found[1], claim=lambda: claim(claimable), clock=clock
    )


def _claimed(runs: QuerySet[Run], *, owner: str, token: str, now: datetime, ttl: timedelta) -> bool:
    claimed = runs.update(
        lease_owner=owner[:200],
        lease_token=token,
        lease_expires_at=now + ttl,
        heartbeat_at=now,
        status=RunStatus.RUNNING,
        updated_at=now,
        started_at=Coalesce(F("started_at"), Value(now)),  # the first claim's, kept
        executions=F("executions") + 1,
        version=F("version") + 1,
        **TAKEN_LEASE,
    )
    return claimed == 1


def priority_swap(
    *, run_id: str, owner: str, seconds: float | None = None, clock: Clock = timezone.now
) -> tuple[str, str] | None:
    """The claim of a worker sent ``run_id`` while queued runs of higher priority wait: it
    claims the best of those instead, and announces ``run_id`` again (cause ``outranked``: its
    message goes ahead of the backlog). ``(claimed run id, token)``; if none of them can be
    claimed (taken meanwhile, or held by a concurrency key), ``run_id`` itself without the rank
    check; None when ``run_id`` is not claimable either."""
    rivals = paced_claims.outranking(run_id=run_id, now=clock())
    if not rivals:
        return None  # refused for another reason (leased, finished, held by its key)
    for other in rivals:
        token = lease_claim(run_id=other, owner=owner, seconds=seconds, clock=clock, ranked=False)
        if token is not None:
            signals.send_run_queued_on_commit(run_id=run_id, cause="outranked")
            return other, token
    token = lease_claim(run_id=run_id, owner=owner, seconds=seconds, clock=clock, ranked=False)
    return (run_id, token) if token is not None else None


def lease_renew(
    *, run_id: str, token: str, seconds: float | None = None, clock: Clock = timezone.now
) -> bool:
    """Extend a held lease (the heartbeat); False when it is no longer ours."""
    now = clock()
    ttl = timedelta(seconds=seconds or conf.RUNLEDGER_LEASE_SECONDS)
    return (
        Run.objects.filter(pk=run_id, lease_token=token, status=RunStatus.RUNNING).update(
            lease_expires_at=now + ttl, heartbeat_at=now
        )
        == 1
    )


#: One statement renews every lease a process holds: the rows still held by the given tokens
#: are locked unless another session holds them (``SKIP LOCKED``: an operator's action or the
#: run's own step write; never waited on, tried again at the next beat), then extended. It
#: answers, for each lease still ours, whether it was renewed; a lease not in the answer is
#: no longer ours (taken over, re-queued, cancelled, finished).
RENEW_ALL = """
WITH held AS (
    SELECT * FROM unnest(%(runs)s::varchar[], %(tokens)s::varchar[], %(ttls)s::float8[])
        AS h(run_id, token, ttl)
), ours AS (
    SELECT r.run_id FROM ledger_run r JOIN held h
        ON r.run_id = h.run_id AND r.lease_token = h.token
     WHERE r.status = 'running'
), free AS (
    SELECT r.run_id, h.ttl FROM ledger_run r JOIN held h
        ON r.run_id = h.run_id AND r.lease_token = h.token
     WHERE r.status = 'running'
       FOR NO KEY UPDATE OF r SKIP LOCKED
), renewed AS (
    UPDATE ledger_run r
       SET lease_expires_at = %(now)s + make_interval(secs => f.ttl), heartbeat_at = %(now)s
      FROM free f WHERE r.run_id = f.run_id
    RETURNING r.run_id
)
SELECT o.run_id, (n.run_id IS NOT NULL) FROM ours o LEFT JOIN renewed n ON n.run_id = o.run_id
"""


@dataclass(frozen=True)
class HeldLease:
    run_id: str
    token: str
    seconds: float


def leases_renew(*, leases: list[HeldLease], clock: Clock = timezone.now) -> dict[str, bool | None]:
    """Extend every lease a worker process holds, in one statement on PostgreSQL (one per lease
    elsewhere). For each run: True renewed, False no longer ours (the lease is lost), None held
    by another session this moment (neither: the next beat tries again)."""
    if not leases:
        return {}
    now = clock()
    if connection.vendor != "postgresql":
        return {
            lease.run_id: lease_renew(
                run_id=lease.run_id, token=lease.token, seconds=lease.seconds, clock=lambda: now
            )
            for lease in leases
        }
    with connection.cursor() as cursor:
        cursor.execute(
            RENEW_ALL,
            {
                "runs": [lease.run_id for lease in leases],
                "tokens": [lease.token for lease in leases],
                "ttls": [float(lease.seconds) for lease in leases],
                "now": now,
            },
        )
        answer: dict[str, bool | None] = {
            run_id: None if not done else True for run_id, done in cursor.fetchall()
        }
    return {lease.run_id: answer.get(lease.run_id, False) for lease in leases}


# --- while a worker holds the lease ------------------------------------------------------


def _fenced(run_id: str, token: str, **changes: Any) -> None:
    """One compare-and-set on a running run held by ``token``; ``LeaseLost`` otherwise. A
    change that blocks or fails the run records its cause (step, error signature) with it."""
    status = changes.get("status")
    if status in (RunStatus.NEEDS_ATTENTION, RunStatus.FAILED):
        changes.update(stop_cause(status, changes))
    runs = Run.objects.filter(pk=run_id, lease_token=token, status=RunStatus.RUNNING)
    if runs.update(**changes, version=F("version") + 1) != 1:
        raise LeaseLost(run_id)


def run_count_resume(
    *, run_id: str, token: str, free: bool = False, clock: Clock = timezone.now
) -> None:
    """Count one resume (every execution after the first is one), except the one after an
    execution that a pause held (``free``): that one clears the flag instead."""
    if free:
        _fenced(run_id, token, resume_free=False, updated_at=clock())
        return
    _fenced(run_id, token, resume_count=F("resume_count") + 1, updated_at=clock())


def run_woke(*, run_id: str, token: str, clock: Clock = timezone.now) -> None:
    """The execution that a retry's back-off, a sleep or a wait for an event released the run
    for: it clears ``wake_at`` (and ``wait_event``) and,
    unlike a resume after a crash, costs no resume budget."""
    _fenced(run_id, token, wake_at=None, wait_event="", updated_at=clock())


def run_defer(
    *, run_id: str, token: str, wake_at: datetime, detail: str, clock: Clock = timezone.now
) -> None:
    """Release a running run whose step's next attempt is due at ``wake_at`` (a back-off too
    long to wait holding the lease): queued, claimable from then, and announced after the
    commit with that time (``signals.run_queued``, cause ``backoff``, ``eta``). If the message
    is lost, the sweep re-queues the run once it is overdue."""
    now = clock()
    with transaction.atomic():
        _fenced(
            run_id,
            token,
            status=RunStatus.QUEUED,
            wake_at=wake_at,
            detail=detail,
            **_RELEASED,
            updated_at=now,
            status_changed_at=now,
        )
        signals.send_run_queued_on_commit(run_id=run_id, cause="backoff", eta=wake_at)


def run_hold_paused(
    *,
    run_id: str,
    token: str,
    pause_id: int,
    step_id: str,
    detail: str,
    clock: Clock = timezone.now,
) -> None:
    """Stop a running run as ``paused`` by the pause ``pause_id``, releasing its lease; the
    next execution (once the pause is lifted) costs no resume budget."""
    now = clock()
    _fenced(
        run_id,
        token,
        status=RunStatus.PAUSED,
        pause_id=pause_id,
        resume_free=True,
        reason="",
        blocked_step_id=step_id,
        detail=detail,
        **_RELEASED,
        updated_at=now,
        status_changed_at=now,
    )


def run_stamp_plan(*, run_id: str, token: str, clock: Clock = timezone.now) -> None:
    """Record the plan version, tool schema and code version of the agent as this worker has it,
    on a run no worker stamped yet (its first execution): the record its replays are held to.
    Part of the claim, not a change of state a person saw: the run's version stays."""
    run = Run.objects.only("agent").get(pk=run_id)
    definition = registry.get_agent(run.agent)
    assert definition is not None
    stamped = Run.objects.filter(
        pk=run_id, lease_token=token, status=RunStatus.RUNNING, tool_schema_hash=""
    ).update(
        plan_version=definition.plan_version,
        tool_schema_hash=definition.tool_schema_hash,
        code_version=definition.code_version,
        updated_at=clock(),
    )
    if stamped != 1:
        raise LeaseLost(run_id)


def run_replan(*, run_id: str, token: str, clock: Clock = timezone.now) -> None:
    """Record today's plan version and tool schema on a run that resumes under ``replan``."""
    run = Run.objects.only("agent").get(pk=run_id)
    definition = registry.get_agent(run.agent)
    assert definition is not None
    _fenced(
        run_id,
        token,
        plan_version=definition.plan_version,
        tool_schema_hash=definition.tool_schema_hash,
        code_version=definition.code_version,
        updated_at=clock(),
    )


def run_block(*, run_id: str, token: str, why: RunBlocked, clock: Clock = timezone.now) -> None:
    """Stop a running run as needs_attention with the reason, the step and the detail; the
    notification that a person is needed is queued in the same transaction (an outbox). At an
    approval gate (``ApprovalRequired``) the gate is opened in it too, with its own notification."""
    now = clock()
    with transaction.atomic():
        _fenced(
            run_id,
            token,
            status=RunStatus.NEEDS_ATTENTION,
            reason=why.reason,
            blocked_step_id=why.step_id,
            detail=why.detail,
            # ctx.ask's timeout: the sweep queues the run then (transitions.question_timeout)
            wake_at=why.wake_at if isinstance(why, QuestionAsked) else None,
            **_RELEASED,
            updated_at=now,
            status_changed_at=now,
        )
        if isinstance(why, ApprovalRequired):
            gates.gate_open(run_id=run_id, why=why, now=now)  # its own notification, once
        else:
            asked = why.step_id if isinstance(why, QuestionAsked) else ""
            notify.notify_run_blocked(run_id=run_id, at=now, question_step=asked)
        notify.notify_run_event(run_id=run_id, at=now)


def run_finish(
    *,
    run_id: str,
    token: str,
    status: RunStatus,
    result: Any = None,
    error: str = "",
    reason: str = "",
    step_id: str = "",
    clock: Clock = timezone.now,
) -> None:
    """End a running run as succeeded or failed, releasing its lease; its completion event is
    queued for the subscribed applications in the same transaction (an outbox). ``reason``:
    why a failed run stopped, when the ledger stopped it (``deadline``); ``step_id``: the step
    that failed it, when one did (kept as the run's ``cause_step`` for the incidents page)."""
    now = clock()
    with transaction.atomic():
        _fenced(
            run_id,
            token,
            status=status,
            result=result,
            error=error,
            reason=reason,
            cause_step=step_id[:255],
            blocked_step_id="",
            detail="",
            **_RELEASED,
            updated_at=now,
            status_changed_at=now,
            finished_at=now,
        )
        notify.notify_run_event(run_id=run_id, at=now)


def run_continue_as_new(*, run: Run, token: str, inputs: Any, clock: Clock = timezone.now) -> Run:
    """Finish the run as succeeded and queue its continuation, in one fenced transaction.

    A worker that lost its lease creates nothing; a worker that dies after the commit leaves a
    finished run that no one executes again, so there is exactly one continuation. The workers
    learn of the new run through ``signals.run_queued`` (sent after the commit).
    """
    with transaction.atomic():
        child = run_start(
            agent=run.agent,
            inputs=inputs,
            max_resumes=run.max_resumes,
            clock=clock,
            parent=run,
            parent_kind="continue",
        )
        # An application that subscribed to this run follows its work into the continuation.
        events.subscriptions_follow(from_run_id=run.run_id, to_run_id=child.run_id, clock=clock)
        run_finish(
            run_id=run.run_id,
            token=token,
            status=RunStatus.SUCCEEDED,
            result={"continued_as": child.run_id},
            clock=clock,
        )  # LeaseLost rolls the new run back
        signals.send_run_queued_on_commit(run_id=child.run_id, cause="continue")
    return child


def run_hand_back(*, run_id: str, token: str, step_id: str, clock: Clock = timezone.now) -> None:
    """A draining worker gives a running run back: the lease is released and the run queued
    again at once (announced, so another worker continues it without waiting for the lease to
    expire). Fenced: a worker that lost its lease hands back nothing. The execution that
    continues it costs no resume budget (``resume_free``): a deploy is not the run's fault."""
    now = clock()
    with transaction.atomic():
        _fenced(
            run_id,
            token,
            status=RunStatus.QUEUED,
            resume_free=True,
            **_RELEASED,
            detail=f"handed back before step {step_id!r} by a stopping worker; re-queued",
            updated_at=now,
            status_changed_at=now,
        )
        signals.send_run_queued_on_commit(run_id=run_id, cause="handback")


# --- recovery: the lease sweep ------------------------------------------------------------


def run_requeue_expired(*, lease: ExpiredLease, clock: Clock = timezone.now) -> bool:
    """Put a run whose lease expired back in the queue; True for the one caller that did.

    A compare-and-set on the token the sweep saw: if the worker renewed in the meantime, another
    worker claimed the run, or another sweeper re-queued it first, nothing changes. Clearing the
    token fences the old worker for good: if it wakes up, every write it tries is refused.
    """
    now = clock()
    run_id, owner = lease.run_id, lease.owner or "?"
    runs = Run.objects.filter(pk=run_id, status=RunStatus.RUNNING, lease_token=lease.token)
    if lease.token is not None:
        runs = runs.filter(lease_expires_at__lt=now)
    why = f"worker {owner} stopped renewing its lease; re-queued by the sweep"
    try:
        with bounded_lock_wait(conf.RUNLEDGER_SWEEP_LOCK_WAIT_SECONDS):
            # A row another session holds (a frozen worker inside a step's write) is skipped,
            # not waited on: the next pass comes back to it.
            if not _skip_locked(runs):
                return False
            updated = runs.update(
                status=RunStatus.QUEUED,
                **TAKEN_LEASE,
                **_RELEASED,
                detail=why,
                updated_at=now,
                status_changed_at=now,
                version=F("version") + 1,
            )
            if updated == 1:
                Execution.objects.filter(run_id=run_id, ended_at__isnull=True).update(
                    ending=ExecutionEnding.CRASHED,
                    ended_at=now,
                    error=f"found by the sweep: {why}",
                )
    except LockRefused as exc:
        log.warning("run %s: its rows are held by another session; skipped (%s)", run_id, exc)
        return False
    if updated == 1:
        log.warning("run %s: lease of %s expired; re-queued", run_id, owner)
        signals.send_run_queued_on_commit(run_id=run_id, cause="recovery")
    return updated == 1


def run_requeue_lost(*, run_id: str, seen_at: datetime, clock: Clock = timezone.now) -> bool:
    """Claim the right to enqueue a lost run once more (compare-and-set on updated_at)."""
    now = clock()
    runs = Run.objects.filter(pk=run_id, status=RunStatus.QUEUED, updated_at=seen_at)
    try:
        with bounded_lock_wait(conf.RUNLEDGER_SWEEP_LOCK_WAIT_SECONDS):
            updated = runs.update(updated_at=now) if _skip_locked(runs) else 0
    except LockRefused as exc:
        log.warning("run %s: its row is held by another session; skipped (%s)", run_id, exc)
        return False
    if updated == 1:
        log.warning("run %s: queued since %s with no worker; enqueued again", run_id, seen_at)
        signals.send_run_queued_on_commit(run_id=run_id, cause="recovery")
    return updated == 1


def run_wake_due(*, run_id: str, seen_at: datetime, clock: Clock = timezone.now) -> bool:
    """Claim the right to announce a released run whose ``wake_at`` came (compare-and-set on
    ``updated_at``, which this moves past ``wake_at``: one wake per release). Its timed message
    may also come; the lease admits one of the two. ``wake_at`` stays, so the claim still counts
    the wake as planned (no resume budget)."""
    now = clock()
    runs = Run.objects.filter(pk=run_id, status=RunStatus.QUEUED, updated_at=seen_at)
    try:
        with bounded_lock_wait(conf.RUNLEDGER_SWEEP_LOCK_WAIT_SECONDS):
            updated = runs.update(updated_at=now) if _skip_locked(runs) else 0
    except LockRefused as exc:
        log.warning("run %s: its row is held by another session; skipped (%s)", run_id, exc)
        return False
    if updated == 1:
        log.info("run %s: due to wake; announced by the sweep", run_id)
        signals.send_run_queued_on_commit(run_id=run_id, cause="wake")
    return updated == 1


# --- the execution record -----------------------------------------------------------------


def execution_begin(
    *,
    run_id: str,
    number: int,
    worker: str,
    host: str = "",
    pid: int | None = None,
    task_id: str = "",
    clock: Clock = timezone.now,
) -> None:
    """Record that execution ``number`` of the run began (one insert, after the claim)."""
    Execution(
        run_id=run_id,
        number=number,
        worker=worker[:200],
        host=host[:200],
        pid=pid,
        task_id=task_id[:200],
        started_at=clock(),
    ).save(force_insert=True)


def execution_end(
    *,
    run_id: str,
    number: int,
    ending: ExecutionEnding,
    replayed: int = 0,
    executed: int = 0,
    reason: str = "",
    step_id: str = "",
    error: str = "",
    clock: Clock = timezone.now,
) -> bool:
    """Record how execution ``number`` ended (one update); False when its end was recorded
    already (the sweep found it crashed first: a lost lease then corrects that). A lost lease
    of an execution that the run's cancel ended already (``cancelled``, by whom and why) only
    adds the worker's counts, as does ``cancelled`` (the agent saw the cancel and stopped)."""
    open_rows = Execution.objects.filter(run_id=run_id, number=number)
    if ending in (ExecutionEnding.LEASE_LOST, ExecutionEnding.CANCELLED):
        counted = open_rows.filter(ending=ExecutionEnding.CANCELLED).update(
            replayed=replayed, executed=executed
        )
        if counted:
            return True
        open_rows = open_rows.filter(ending__in=(ExecutionEnding.RUNNING, ExecutionEnding.CRASHED))
    else:
        open_rows = open_rows.filter(ended_at__isnull=True)
    return (
        open_rows.update(
            ending=ending,
            ended_at=clock(),
            replayed=replayed,
            executed=executed,
            reason=reason[:20],
            step_id=step_id[:255],
            error=error[:2000],
        )
        == 1
    )


def beacon_beat(*, name: str, detail: dict[str, Any], clock: Clock = timezone.now) -> bool:
    """Record that a periodic duty ran (the sweep's heartbeat on the runs list); False when
    another session holds the beacon's row (a frozen process in the middle of its own beat):
    this beat is skipped rather than waited for, the next one records it."""
    try:
        with bounded_lock_wait(conf.RUNLEDGER_SWEEP_LOCK_WAIT_SECONDS):
            Beacon.objects.update_or_create(name=name, defaults={"at": clock(), "detail": detail})
    except LockRefused as exc:
        log.warning("beacon %s: held by another session; this beat skipped (%s)", name, exc)
        return False
    return True


def _skip_locked(runs: QuerySet[Run]) -> bool:
    """Lock the one row of ``runs`` unless another session holds it (``SKIP LOCKED``): True
    when this transaction now holds it, False when it is held elsewhere or does not match."""
    held = runs.select_for_update(skip_locked=True, no_key=True).values_list("pk", flat=True)
    return bool(list(held[:1]))


def beacon_forget(*, name: str) -> None:
    """Drop a beacon (a worker's, when it stops)."""
    Beacon.objects.filter(name=name).delete()
