"""``make bench-concurrency``'s command runs end to end on a real ``runledger worker`` and writes
its named figures (issue 31). Nothing here is timed: the figures' values are the bench's
business; this checks that the runs finished, that the sampler saw the worker's processes and
connections, and that every named key is in bench-results.json."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from django.core.management import call_command
from django.db import connection

from harness.bench import concurrency, inflight_agents
from harness.management.commands import bench_concurrency

KEYS = ("wall_s", "start_rate", "peak_rss_mib", "peak_db_conns", "errors")


def test_a_mode_is_a_worker_command_line_with_r_capped() -> None:
    built_in = concurrency.parse_mode("threads")
    assert built_in.command(5000) == ["worker", "--runs-in-flight", "1000"]
    assert built_in.command(10) == ["worker", "--runs-in-flight", "10"]
    mine = concurrency.parse_mode(
        f"pooled={inflight_agents.ASYNC_AGENT}:worker --pool custom -c {{n}}"
    )
    assert (mine.name, mine.agent, mine.needs_async) == ("pooled", "bench-inflight-async", True)
    assert mine.command(100) == ["worker", "--pool", "custom", "-c", "100"]
    assert concurrency.parse_mode("p=worker -c 8").agent == inflight_agents.SYNC_AGENT
    with pytest.raises(ValueError, match="must start with 'worker'"):
        concurrency.parse_mode("bad=celery worker")
    with pytest.raises(ValueError, match="no runledger mode"):
        concurrency.parse_mode("nonesuch")


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(connection.vendor != "postgresql", reason="the bench needs PostgreSQL")
def test_the_bench_runs_its_runs_on_a_real_worker_and_writes_the_named_figures(
    tmp_path: Path,
) -> None:
    results = tmp_path / "bench-results.json"
    out = io.StringIO()
    call_command(
        bench_concurrency.Command(),  # the harness app is not installed in the suite
        runs="5",
        delay=0.1,
        modes="threads",
        dbos="",
        broker="filesystem",  # never the machine's shared Redis from the suite
        timeout=300,
        json=str(results),
        stdout=out,
    )
    figures = json.loads(results.read_text())["concurrency"]["figures"]
    prefix = "concurrency.runledger.threads.R5"
    for key in KEYS:
        assert f"{prefix}.{key}" in figures, (key, out.getvalue())
        assert f"{prefix}.{key}: " in out.getvalue()
    assert figures[f"{prefix}.errors"]["value"] == 0, out.getvalue()
    # The sampler saw the worker's processes and their connections to the cell's database.
    assert figures[f"{prefix}.peak_rss_mib"]["value"] > 0
    assert figures[f"{prefix}.peak_db_conns"]["value"] >= 1
    assert figures["concurrency.ideal_wall_s"]["value"] == pytest.approx(0.5)
