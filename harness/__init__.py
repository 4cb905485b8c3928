"""The development equipment, never in the wheel: real Celery workers and beat on a private
broker (``cluster``), the kill test that SIGKILLs them mid-run and checks recovery
(``killtest``, ``manage.py killtest``), the fault-point registry installed as the product's one
hook (``faults``, ``ledger.faultpoints``), the faults beyond SIGKILL: a TCP proxy that cuts
database lines on cue (``proxy``), private PostgreSQL and Redis servers to restart
(``servers``), the soak that mixes every fault on two brokers (``soak``, ``manage.py soak``);
the demo's staged crashes (``demo_scenarios``, ``manage.py demo``), the benchmarks and bulk
seeding (``bench/``, ``manage.py bench_*``, ``seed_bulk``), and the scripts the Makefile runs
(``with_postgres.py``, ``under_load.py``, ``ensure_chromium.sh``).

A deployment never installs it: ``runs.settings`` adds the ``harness`` app only when
``RUNLEDGER_HARNESS=1`` (the Makefile's equipment targets and the workers a ``Cluster`` starts
set it), and the system check ``runledger.E001`` fails when it is installed with DEBUG off
unless silenced on purpose. It may import everything (``runs``, ``ledger``,
``ledger.examples``); nothing in ``runs`` or ``ledger`` may import it.
"""
