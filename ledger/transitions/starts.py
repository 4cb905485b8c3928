"""Many runs started at once: every item checked first, then one transaction and one
announcement to the workers.

Each item is what ``run_start_once`` takes (agent, inputs, run id, idempotency key, title,
labels, max_resumes, webhooks, reason, concurrency key and limit, priority, start_at,
deadline) and
follows its rules: the same id or key with the same agent and canonical inputs answers the run
the first start made (``created`` False), with other values it is a ``Conflict``. Items of one
batch are judged in order, as if started one after another: a later item repeating an earlier
one answers the earlier one's run.

One bad item refuses the whole batch: ``BatchRefused`` lists every bad item (its index, what is
wrong) and nothing is written — an application that sends 1,000 starts does not have to work
out which 997 of them happened.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from ledger import registry, signals
from ledger.errors import BatchRefused, Conflict, InvalidInput, ItemError, NotJSON
from ledger.models import AuditEvent, Run, WebhookSubscription
from ledger.transitions import events
from ledger.transitions._common import Actor, Clock
from ledger.transitions.lifecycle import Pace, Started, new_run, same_start, start_audit

#: The most runs one batch starts.
MAX_BATCH = 1000
#: What an item may hold (``run_start_once``'s arguments but ``by``, which is the batch's).
ITEM_FIELDS = frozenset(
    {
        "agent",
        "inputs",
        "run_id",
        "idempotency_key",
        "title",
        "labels",
        "max_resumes",
        "webhooks",
        "reason",
        "concurrency_key",
        "concurrency_limit",
        "priority",
        "start_at",
        "deadline",
        "team",
    }
)
#: How often a batch that lost a race (a concurrent start took one of its ids or keys between
#: the check and the insert) is judged again before the race is reported (``Conflict``).
_ATTEMPTS = 5


@dataclass
class _Item:
    index: int
    candidate: Run
    chosen_id: str | None
    webhooks: list[dict[str, Any]]
    reason: str


def run_start_many(
    items: Sequence[Mapping[str, Any]],
    *,
    by: Actor | None = None,
    reason: str = "",
    clock: Clock = timezone.now,
) -> list[Started]:
    """Start each item's run, or answer the run an identical earlier start made; one
    ``Started`` per item, in order. The new runs, their audit rows (when ``by`` is given) and
    their per-run subscriptions are written in one transaction (a savepoint inside a caller's),
    and announced once after it commits (``signals.runs_queued``).

    Refused, writing nothing: ``InvalidInput`` for a batch that is not a list of 1 to
    ``MAX_BATCH`` items; ``BatchRefused`` (an ``InvalidInput``) listing each bad item."""
    checked, invalid = _checked(_items(items), reason=reason, now=clock())
    for _ in range(_ATTEMPTS):
        answers, conflicts = _judged(checked)
        if invalid or conflicts:
            raise BatchRefused(sorted(invalid + conflicts, key=lambda e: e.index))
        try:
            with transaction.atomic():  # a savepoint: a lost race leaves a caller's transaction
                return _written(checked, answers, by=by)
        except IntegrityError:
            continue
    raise Conflict(
        f"other starts kept taking this batch's run ids or keys while it was written "
        f"({_ATTEMPTS} tries); nothing was written — send the same batch again"
    )


def _items(items: Any) -> list[Mapping[str, Any]]:
    if isinstance(items, str | bytes) or not isinstance(items, Sequence):
        raise InvalidInput("a batch start takes a list of runs to start")
    if not items:
        raise InvalidInput("a batch start needs at least one run")
    if len(items) > MAX_BATCH:
        raise InvalidInput(
            f"a batch starts at most {MAX_BATCH} runs; this one has {len(items)} (split it)"
        )
    return list(items)


def _checked(
    items: list[Mapping[str, Any]], *, reason: str, now: Any
) -> tuple[list[_Item], list[ItemError]]:
    """The valid items as unsaved runs, and what is wrong with each of the others."""
    out: list[_Item] = []
    errors: list[ItemError] = []
    for index, item in enumerate(items):
        try:
            out.append(_checked_item(index, item, reason=reason, now=now))
        except LookupError as exc:
            errors.append(ItemError(index, "unknown-agent", str(exc)))
        except (InvalidInput, NotJSON) as exc:
            errors.append(ItemError(index, "invalid", str(exc)))
    return out, errors


def _checked_item(index: int, item: Any, *, reason: str, now: Any) -> _Item:
    if not isinstance(item, Mapping):
        raise InvalidInput("a run to start is an object with agent and inputs")
    unknown = sorted(str(k) for k in set(item) - ITEM_FIELDS)
    if unknown:
        raise InvalidInput(f"unknown field(s) {', '.join(unknown)}")
    agent = item.get("agent")
    if not isinstance(agent, str) or not agent:
        raise InvalidInput("agent: the name of a registered agent is needed")
    if registry.get_agent(agent) is None:
        known = ", ".join(sorted(registry.agents())) or "none"
        raise LookupError(f"no agent named {agent!r} is registered (registered: {known})")
    max_resumes = item.get("max_resumes")
    if max_resumes is not None and (
        not isinstance(max_resumes, int) or isinstance(max_resumes, bool) or max_resumes < 0
    ):
        raise InvalidInput("max_resumes: a whole number, 0 or more")
    own_reason = item.get("reason")
    if own_reason is not None and not isinstance(own_reason, str):
        raise InvalidInput("reason: text")
    webhooks = events.check_run_webhooks(item.get("webhooks"))
    candidate = new_run(
        agent=agent,
        inputs=item.get("inputs", {}),
        run_id=item.get("run_id"),
        max_resumes=max_resumes,
        now=now,
        parent=None,
        parent_kind="",
        forked_from_step_id="",
        idempotency_key=item.get("idempotency_key"),
        title=item.get("title"),
        labels=item.get("labels"),
        team=item.get("team"),
        pace=Pace(
            concurrency_key=item.get("concurrency_key"),
            concurrency_limit=item.get("concurrency_limit"),
            priority=item.get("priority"),
            start_at=item.get("start_at"),
            deadline=item.get("deadline"),
        ),
    )
    return _Item(index, candidate, item.get("run_id"), webhooks, own_reason or reason)


def _judged(items: list[_Item]) -> tuple[list[Run | None], list[ItemError]]:
    """Per item, the run an identical earlier start made (None: this item makes its run),
    judged against the database (two queries) and the batch's earlier items; and the items
    that conflict with either."""
    ids = [i.candidate.run_id for i in items if i.chosen_id is not None]
    keys = [i.candidate.idempotency_key for i in items if i.candidate.idempotency_key]
    by_id: dict[str, Run] = {}
    by_key: dict[str, Run] = {}
    if ids:
        by_id = {r.run_id: r for r in Run.objects.filter(pk__in=ids)}
    if keys:
        found = Run.objects.filter(Q(idempotency_key__in=keys))
        by_key = {r.idempotency_key: r for r in found if r.idempotency_key}
    answers: list[Run | None] = []
    errors: list[ItemError] = []
    for item in items:
        run, key = item.candidate, item.candidate.idempotency_key
        try:
            earlier = same_start(
                run,
                chosen_id=item.chosen_id,
                by_id=by_id.get(run.run_id) if item.chosen_id is not None else None,
                by_key=by_key.get(key) if key is not None else None,
            )
        except Conflict as exc:
            errors.append(ItemError(item.index, "conflict", str(exc), dict(exc.current)))
            answers.append(None)
            continue
        answers.append(earlier)
        if earlier is None:  # a later item with this id or key repeats (or contradicts) this one
            by_id[run.run_id] = run
            if key is not None:
                by_key[key] = run
    return answers, errors


def _written(items: list[_Item], answers: list[Run | None], *, by: Actor | None) -> list[Started]:
    made = [item for item, earlier in zip(items, answers, strict=True) if earlier is None]
    Run.objects.bulk_create([item.candidate for item in made])
    if by is not None:
        AuditEvent.objects.bulk_create(
            [start_audit(item.candidate, by=by, reason=item.reason) for item in made]
        )
    subscribed: dict[int, list[tuple[WebhookSubscription, str]]] = {}
    for item in made:
        if item.webhooks:
            subscribed[item.index] = events.subscribe_run_at_start(
                item.candidate, item.webhooks, by=by
            )
    now = [item.candidate for item in made if item.candidate.wake_at is None]
    signals.send_runs_queued_on_commit(run_ids=[run.run_id for run in now], cause="start")
    for run in (item.candidate for item in made if item.candidate.wake_at is not None):
        signals.send_run_queued_on_commit(run_id=run.run_id, cause="start", eta=run.wake_at)
    out = []
    for item, earlier in zip(items, answers, strict=True):
        if earlier is None:
            out.append(Started(item.candidate, True, subscribed.get(item.index, [])))
        else:
            out.append(Started(earlier, False))
    return out
