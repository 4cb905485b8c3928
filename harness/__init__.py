"""The kill-test harness: real Celery workers and beat on a private broker (``cluster``), the
kill test that SIGKILLs them mid-run and checks recovery (``killtest``, ``manage.py killtest``),
the hook that puts the crash point ``task.after_execute`` into the workers' tasks (``apps``),
and the faults beyond SIGKILL: a TCP proxy that cuts database lines on cue (``proxy``), private
PostgreSQL and Redis servers to restart (``servers``), and the soak that mixes every fault on
two brokers (``soak``, ``manage.py soak``).

Test equipment, not product: a deployment never installs it. ``runs/settings.py`` adds the
``harness`` app only when ``RUNLEDGER_HARNESS=1`` (``make killtest`` and the workers a
``Cluster`` starts set it); the tests import ``harness.cluster`` and ``harness.killtest``
directly. It may import everything (``runs``, ``ledger``, ``ledger.examples``); nothing in
``runs`` or ``ledger`` may import it.
"""
