"""Celery: the broker, how tasks are acknowledged, and beat's schedule (see runs/celery.py).

The ledger, not the broker, is what makes runs durable. A broker only carries "run X should make
progress" hints; every hint is safe to lose (the lease sweep re-queues a run whose worker died or
whose message vanished) and safe to deliver twice (the run's lease admits one executor). When a
whole worker (parent and children) is SIGKILLed, the filesystem and the SQLAlchemy transports
lose the message it held ("unacked" lives only in the worker's memory), and Redis gives it back
only after visibility_timeout. So recovery comes from the sweep (the kill test relies on nothing
else); the broker only makes it faster.
"""

from __future__ import annotations

from kombu import Queue

from runs.brokers import TRANSPORT as FILESYSTEM_TRANSPORT
from runs.brokers import filesystem_options
from runs.settings import env, sections
from runs.settings.base import VAR_DIR
from runs.settings.ledger import LEDGER

CELERY_BROKER_URL = env.str(
    "CELERY_BROKER_URL",
    "filesystem://localhost//",
    section=sections.BROKER,
    shown="filesystem://localhost// (files under RUNLEDGER_VAR_DIR/broker)",
    doc="The broker: `redis://host:6379/0` or `amqp://user:pass@host:5672//` in production. "
    "The no-server default keeps messages as files shared by the processes of one machine.",
)
CELERY_BROKER_TRANSPORT_OPTIONS: dict[str, object] = {}
if CELERY_BROKER_URL.startswith("filesystem://"):
    # Still a real worker process. The transport is kombu's, fixed to publish each message
    # whole (see runs/brokers.py).
    CELERY_BROKER_TRANSPORT = FILESYSTEM_TRANSPORT
    CELERY_BROKER_TRANSPORT_OPTIONS = filesystem_options(
        VAR_DIR / "broker",
        polling_interval=env.float(
            "RUNLEDGER_BROKER_POLL_SECONDS",
            0.2,
            section=sections.BROKER,
            doc="How often a worker looks for new messages on the filesystem broker.",
        ),
    )
elif CELERY_BROKER_URL.startswith(("redis://", "rediss://")):
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        # Redis re-delivers an unacknowledged message after visibility_timeout, and a message
        # with an ETA or countdown is "unacknowledged" from the moment it is fetched: a timeout
        # shorter than a countdown re-delivers it over and over. runledger's only countdowns
        # are the database retries (10 s at most), and the sweep recovers lost work within
        # seconds, so a long timeout (1 h) costs nothing and keeps a long-running agent's
        # message from being handed to a second worker mid-run (the lease would refuse it).
        "visibility_timeout": env.int(
            "RUNLEDGER_BROKER_VISIBILITY_TIMEOUT",
            3600,
            section=sections.BROKER,
            doc="Redis only: seconds before an unacknowledged message is delivered again.",
        ),
    }
CELERY_TASK_ALWAYS_EAGER = env.bool(
    "CELERY_TASK_ALWAYS_EAGER",
    False,
    section=sections.BROKER,
    doc="Run tasks inline in the process that sends them (tests, one-off scripts).",
)
# One named queue, so that a shared broker can carry other projects' queues beside ours.
CELERY_TASK_DEFAULT_QUEUE = env.str(
    "RUNLEDGER_QUEUE",
    "runledger",
    section=sections.BROKER,
    doc="The queue the runs' tasks (start, resume) go to (a shared broker carries other queues "
    "beside it).",
)
# The control queue: the recovery sweep and notification delivery. They never wait
# behind runs: on a queue of their own, consumed by a worker process of their own
# (`runledger worker` starts one beside the runs' pool, see runs/cli.py), with no expiry.
RUNLEDGER_CONTROL_QUEUE = env.str(
    "RUNLEDGER_CONTROL_QUEUE",
    f"{CELERY_TASK_DEFAULT_QUEUE}.control",
    section=sections.BROKER,
    shown="RUNLEDGER_QUEUE + `.control`",
    doc="The queue of the recovery sweep and notification delivery, consumed by the control "
    "process every `runledger worker` starts (so that recovery never waits behind runs).",
)
# Runs the sweep recovered (a dead worker's, a lost message's) and runs a stopping worker handed
# back: their resume goes here, consumed by every runs' pool beside RUNLEDGER_QUEUE (the broker
# takes from the two in turn), so that a recovered run does not wait behind the whole backlog.
RUNLEDGER_RECOVERED_QUEUE = env.str(
    "RUNLEDGER_RECOVERED_QUEUE",
    f"{CELERY_TASK_DEFAULT_QUEUE}.recovered",
    section=sections.BROKER,
    shown="RUNLEDGER_QUEUE + `.recovered`",
    doc="The queue of the resumes of recovered and handed-back runs, consumed by the runs' pool "
    "beside `RUNLEDGER_QUEUE` in turn (a recovered run does not wait behind the backlog).",
)
# A plain `celery -A runs worker` (no -Q) consumes all three, as before there was more than one:
# it still recovers, though its sweeps then wait for a free slot like any message.
CELERY_TASK_QUEUES = [
    Queue(name)
    for name in (CELERY_TASK_DEFAULT_QUEUE, RUNLEDGER_RECOVERED_QUEUE, RUNLEDGER_CONTROL_QUEUE)
]
CELERY_TASK_ROUTES = {
    name: {"queue": RUNLEDGER_CONTROL_QUEUE}
    for name in (
        "runledger.sweep",
        "runledger.notifications",
        "runledger.alerts",
        "runledger.schedules",
    )
}
# Retention (runledger.prune) stays on the runs' queue: a long pass must not hold the control
# process while a sweep is due.
# Acknowledge a task after it returns, not when it is fetched: a worker that dies mid-task
# leaves the message to be re-delivered (where the transport can) instead of silently consumed.
CELERY_TASK_ACKS_LATE = True
# When a pool child is killed (OOM, SIGKILL), put its message back rather than ack it as failed.
# The re-delivered task finds the dead child's lease still live and does nothing; the sweep
# re-queues the run when that lease expires. A run is never executed twice at once either way.
CELERY_TASK_REJECT_ON_WORKER_LOST = True
# A task that raised is acknowledged: retrying is the ledger's job (resume), not the broker's
# (but a start or resume that could not reach the database is sent again with back-off:
# runs/operations/tasks.py, DATABASE_ERRORS).
CELERY_TASK_ACKS_ON_FAILURE_OR_TIMEOUT = True
# Agent runs are long and uneven: a worker reserves one message per pool process, no more, so a
# worker that dies takes no extra prefetched messages down with it, and a free worker is not
# starved while a busy one sits on a backlog.
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# The dashboard reads state from the ledger, never from Celery results: store none.
CELERY_TASK_IGNORE_RESULT = True
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]

_SWEEP = LEDGER["RUNLEDGER_SWEEP_SECONDS"]
_NOTIFY = LEDGER["RUNLEDGER_NOTIFY_EVERY_SECONDS"]
_ALERTS = LEDGER["RUNLEDGER_ALERT_EVERY_SECONDS"]
# No expiry: a sweep or a delivery is never discarded unseen (in issue 24, a worker under a
# deep runs queue threw away every expired sweep and recovery took 323 s). The control process
# takes each at once; a pile-up cannot form behind it, and two sweeps back to back are harmless
# (every re-queue is a compare-and-set).
CELERY_BEAT_SCHEDULE: dict[str, dict[str, object]] = {
    "runledger-sweep": {"task": "runledger.sweep", "schedule": _SWEEP},
    "runledger-notifications": {"task": "runledger.notifications", "schedule": _NOTIFY},
    "runledger-alerts": {"task": "runledger.alerts", "schedule": _ALERTS},
    # Schedules' due ticks start their runs (ledger.processes.schedules): as often as the sweep;
    # two beats, or a pass killed mid-way, still start one run per tick (the tick's key).
    "runledger-schedules": {"task": "runledger.schedules", "schedule": _SWEEP},
}
CELERY_BEAT_SCHEDULE_FILENAME = str(VAR_DIR / "celerybeat-schedule")
