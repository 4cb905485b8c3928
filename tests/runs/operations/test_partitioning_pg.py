"""docs/step_partitioning.sql at small scale: the step table partitioned by month on
PostgreSQL, a query by run opens one partition, and retention drops a month whole."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from django.db import IntegrityError, connection

SQL = Path(__file__).resolve().parents[3] / "docs" / "step_partitioning.sql"
MONTHS = [datetime(2026, m, 1, tzinfo=UTC) for m in (1, 2, 3)]

pytestmark = pytest.mark.django_db


@pytest.fixture
def partitioned() -> None:
    if connection.vendor != "postgresql":
        pytest.skip("partitioning is a PostgreSQL feature")
    with connection.cursor() as cur:
        cur.execute("CREATE SCHEMA partition_demo; SET LOCAL search_path TO partition_demo")
        cur.execute(SQL.read_text())
        for month in MONTHS:
            cur.execute("SELECT ledger_step_month_partition(%s)", [month.date()])


def _insert(cur, run_id: str, created: datetime, steps: int) -> None:
    cur.execute(
        """INSERT INTO ledger_step_by_month
               (run_id, run_created_at, step_id, input_hash, status, updated_at, kind, seq)
           SELECT %s, %s, 'step-' || n, 'h', 'succeeded', now(), 'read', n
           FROM generate_series(1, %s) AS n""",
        [run_id, created, steps],
    )


def test_a_month_of_steps_is_dropped_whole_and_a_run_reads_one_partition(partitioned) -> None:
    with connection.cursor() as cur:
        for i, month in enumerate(MONTHS):
            for r in range(10):
                _insert(cur, f"run_{i}_{r}", month.replace(day=2 + r), steps=100)
        cur.execute(
            "SELECT tableoid::regclass::text, count(*) FROM ledger_step_by_month GROUP BY 1 "
            "ORDER BY 1"
        )
        assert cur.fetchall() == [
            ("ledger_step_2026_01", 1000),
            ("ledger_step_2026_02", 1000),
            ("ledger_step_2026_03", 1000),
        ]

        # The per-run uniqueness holds across the partitioned table.
        cur.execute("SAVEPOINT dup")
        with pytest.raises(IntegrityError, match="duplicate key"):
            _insert(cur, "run_1_0", MONTHS[1].replace(day=2), steps=1)
        cur.execute("ROLLBACK TO SAVEPOINT dup")

        # A run's steps, by run and its creation time: the plan opens one partition.
        cur.execute(
            "EXPLAIN SELECT * FROM ledger_step_by_month WHERE run_id = %s AND run_created_at = %s",
            ["run_1_3", MONTHS[1].replace(day=5)],
        )
        plan = "\n".join(row[0] for row in cur.fetchall())
        assert "ledger_step_2026_02" in plan
        assert "ledger_step_2026_01" not in plan and "ledger_step_2026_03" not in plan

        # Retention: January is archived, so it is detached and dropped, not deleted row by row.
        cur.execute("ALTER TABLE ledger_step_by_month DETACH PARTITION ledger_step_2026_01")
        cur.execute("DROP TABLE ledger_step_2026_01")
        cur.execute("SELECT count(*), min(run_created_at) FROM ledger_step_by_month")
        count, oldest = cur.fetchone()
        assert count == 2000 and oldest >= MONTHS[1]
