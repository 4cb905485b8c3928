"""Runs in flight (``make bench-concurrency``, issue 31): R runs started at once, each waiting
on a model ``calls`` times (a loopback server answering after ``delay`` seconds) with a durable
read after each call, on runledger's real ``runledger worker`` processes and on DBOS Transact
(in the peers' virtualenv), alternating, on one PostgreSQL server.

Per system, mode and R (one *cell*): wall time from the first start until the last run finished,
runs/s started, the peak RSS of all the worker processes (summed over each process tree, sampled
from /proc), the peak number of PostgreSQL connections to the cell's database (sampled from
``pg_stat_activity``; the bench's own connections are not counted) and the runs that did not
succeed. Each cell gets a database of its own (runledger's: a copy of the migrated one; DBOS's:
created by DBOS), dropped after, so that no cell's leftovers reach the next.

A runledger mode is a worker command line (``{n}`` is R capped at ``cap``) and an agent: the
worker's own options stay a parameter, so that a new worker mode is measured by naming it
(``--mode NAME=AGENT:ARGS``), not by editing this file.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
from django.db import connection
from django.db.models import Max
from django.utils import timezone

from harness.bench import inflight_agents
from harness.cluster import Cluster, database_url, wait_for
from ledger.engine import pooling
from ledger.models import FINAL_STATUSES, Run, RunStatus

HERE = Path(__file__).resolve().parent
STARTER = "bench-concurrency-starter"  # the bench's own connections, not counted
AGENT_MODULES = f"ledger.examples.agents,{inflight_agents.__name__}"
GIB_MIB = 1024.0
GOAL_WALL_RATIO = 1.5  # 1,000 runs in flight within 1.5x the ideal wall time
GOAL_RSS_MIB = 1024.0  # all worker processes of the machine
GOAL_DB_CONNS = 25  # the whole machine, at every R
GOAL_AT_R = 1000


@dataclass(frozen=True)
class Mode:
    """One way of running: ``system`` (runledger or dbos), its mode's name, the agent (runledger)
    and the worker's command line after ``runledger`` (``{n}``: R capped at ``cap``); ``max_r``
    leaves out the R a mode would take too long for (prefork with a handful of slots)."""

    system: str
    name: str
    agent: str = ""
    argv: str = ""
    cap: int = 1000
    max_r: int | None = None
    needs_async: bool = False

    def command(self, runs: int) -> list[str]:
        return shlex.split(self.argv.format(n=min(runs, self.cap)))


RUNLEDGER_MODES = {
    "threads": Mode(
        "runledger", "threads", inflight_agents.SYNC_AGENT, "worker --runs-in-flight {n}"
    ),
    "prefork": Mode("runledger", "prefork", inflight_agents.SYNC_AGENT, "worker -c 8", max_r=100),
    "async": Mode(
        "runledger",
        "async",
        inflight_agents.ASYNC_AGENT,
        "worker --runs-in-flight {n}",
        needs_async=True,
    ),
}
DBOS_MODES = {"sync": Mode("dbos", "sync"), "async": Mode("dbos", "async")}


def parse_mode(text: str) -> Mode:
    """``NAME=AGENT:ARGS`` (``async=bench-inflight-async:worker --pool runs -c {n}``) or
    ``NAME=ARGS`` (the sync agent); ``NAME`` alone picks a built-in runledger mode."""
    if "=" not in text:
        if text not in RUNLEDGER_MODES:
            raise ValueError(f"no runledger mode {text!r} (built in: {', '.join(RUNLEDGER_MODES)})")
        return RUNLEDGER_MODES[text]
    name, rest = text.split("=", 1)
    agent, argv = inflight_agents.SYNC_AGENT, rest
    head = rest.split(":", 1)[0]
    if ":" in rest and " " not in head:
        agent, argv = head, rest.split(":", 1)[1]
    if not argv.split() or argv.split()[0] != "worker":
        raise ValueError(f"mode {name!r}: the command line must start with 'worker', not {argv!r}")
    return Mode("runledger", name, agent, argv, needs_async=agent == inflight_agents.ASYNC_AGENT)


@dataclass
class Cell:
    """One system, mode and R: what was measured."""

    mode: Mode
    runs: int
    wall_s: float | None = None
    start_rate: float | None = None
    peak_rss_mib: float | None = None
    peak_db_conns: int | None = None
    errors: int | None = None
    note: str = ""
    skipped: str = ""

    @property
    def prefix(self) -> str:
        return f"concurrency.{self.mode.system}.{self.mode.name}.R{self.runs}"

    def figures(self, ideal_s: float) -> dict[str, tuple[float | None, str]]:
        out: dict[str, tuple[float | None, str]] = {
            f"{self.prefix}.wall_s": (self.wall_s, "s"),
            f"{self.prefix}.start_rate": (self.start_rate, "runs/s"),
            f"{self.prefix}.peak_rss_mib": (self.peak_rss_mib, "MiB"),
            f"{self.prefix}.peak_db_conns": (self.peak_db_conns, "connections"),
            f"{self.prefix}.errors": (self.errors, "runs"),
        }
        if self.wall_s is not None:
            out[f"{self.prefix}.wall_vs_ideal"] = (self.wall_s / ideal_s, "x")
        if self.peak_rss_mib is not None:
            out[f"{self.prefix}.rss_vs_goal"] = (self.peak_rss_mib / GOAL_RSS_MIB, "x of 1 GiB")
        if self.peak_db_conns is not None:
            out[f"{self.prefix}.db_conns_vs_goal"] = (
                self.peak_db_conns / GOAL_DB_CONNS,
                f"x of {GOAL_DB_CONNS}",
            )
        return out


# --- sampling ----------------------------------------------------------------------------------


def process_tree(root: int) -> list[int]:
    """``root`` and every process below it (from /proc/<pid>/task/*/children)."""
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        with contextlib.suppress(OSError):
            for task in Path(f"/proc/{pid}/task").iterdir():
                with contextlib.suppress(OSError):
                    todo += [int(c) for c in (task / "children").read_text().split()]
    return found


def rss_kib(pid: int) -> int:
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


class Sampler:
    """Samples, every ``interval`` seconds until stopped, the summed RSS of the process trees
    under ``roots()`` and the connections to ``database`` (but this sampler's own and the
    bench's, named ``STARTER``); keeps the peaks."""

    def __init__(
        self, admin_url: str, database: str, roots: Callable[[], list[int]], interval: float = 0.2
    ) -> None:
        self.admin_url, self.database, self.roots, self.interval = (
            admin_url,
            database,
            roots,
            interval,
        )
        self.peak_rss_kib = 0
        self.peak_conns = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> Sampler:
        self._conn = psycopg.connect(self.admin_url, autocommit=True, application_name=STARTER)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._conn.close()

    def sample(self) -> None:
        pids = {pid for root in self.roots() for pid in process_tree(root)}
        self.peak_rss_kib = max(self.peak_rss_kib, sum(rss_kib(pid) for pid in pids))
        row = self._conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = %s"
            " AND application_name IS DISTINCT FROM %s",
            [self.database, STARTER],
        ).fetchone()
        self.peak_conns = max(self.peak_conns, int(row[0]) if row else 0)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval)
        self.sample()


# --- the equipment around the cells ------------------------------------------------------------


@contextlib.contextmanager
def model_server(delay: float) -> Iterator[str]:
    """The loopback model (harness/bench/slow_model.py) in a process of its own; its base URL."""
    proc = subprocess.Popen(
        [sys.executable, str(HERE / "slow_model.py"), "--delay", str(delay)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        if not line.startswith("port "):
            raise RuntimeError(f"the loopback model server did not start: {line!r}")
        yield f"http://127.0.0.1:{int(line.split()[1])}"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def redis_url(host: str = "127.0.0.1", port: int = 6379) -> str | None:
    """``redis://host:port/<n>`` on an empty database of the machine's Redis if it answers
    (from 15 down: the bench flushes it after each cell, so it must find it empty), else None."""
    try:
        import redis
    except ImportError:
        return None
    try:
        for db in range(15, 0, -1):
            client = redis.Redis(host=host, port=port, db=db, socket_timeout=1)
            if client.dbsize() == 0:
                return f"redis://{host}:{port}/{db}"
    except Exception:  # no Redis here: the filesystem broker
        return None
    return None


def flush_redis(url: str) -> None:
    import redis

    redis.Redis.from_url(url).flushdb()


def admin_url() -> str:
    """The server's maintenance database (``postgres``), as a URL psycopg takes."""
    return database_url({**connection.settings_dict, "NAME": "postgres"})


def _admin(sql: str) -> None:
    with psycopg.connect(admin_url(), autocommit=True, application_name=STARTER) as conn:
        conn.execute(sql)  # type: ignore[arg-type]


def _disconnect() -> None:
    """Close this process's connection, and its pool where Django keeps one (``OPTIONS["pool"]``:
    a pooled connection stays open to the database after ``close()``)."""
    pooling.close_pool()


@contextlib.contextmanager
def cell_database(name: str) -> Iterator[None]:
    """This process's database switched to ``name``, a copy of the migrated one (its template),
    for the block; dropped after."""
    sd = connection.settings_dict
    template = sd["NAME"]
    _disconnect()
    _admin(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
    options = sd.setdefault("OPTIONS", {})
    saved = options.get("application_name")
    sd["NAME"], options["application_name"] = name, STARTER
    try:
        yield
    finally:
        _disconnect()
        sd["NAME"] = template
        if saved is None:
            options.pop("application_name", None)
        else:
            options["application_name"] = saved
        _admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


# --- async agents ------------------------------------------------------------------------------


def async_agents_work() -> tuple[bool, str]:
    """Whether ``@agent`` on an ``async def`` runs here: one run of the async bench agent (a
    read step, no model call) executed in this process. (True, "") or (False, why not)."""
    if not inflight_agents.ASYNC_REGISTERED:
        return False, "@agent refuses an async def"
    from harness.unannounced import start_unannounced
    from ledger.processes import execute

    quiet = logging.getLogger("ledger.processes.execute")
    level = quiet.level
    quiet.setLevel(logging.CRITICAL)  # the probe failing is an answer, not an error
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # "coroutine ... never awaited"
            run = start_unannounced(
                agent=inflight_agents.ASYNC_AGENT, inputs={"calls": 0, "reads": 1}
            )
            execute.run_execute(run_id=run.run_id, worker=f"bench-probe-{os.getpid()}")
            run.refresh_from_db()
    except Exception as exc:
        return False, f"{type(exc).__name__}: {exc}"
    finally:
        quiet.setLevel(level)
    if run.status != RunStatus.SUCCEEDED:
        return False, f"the probe run {run.status}: {str(run.error or '')[:200]}"
    return True, ""


# --- the cells ---------------------------------------------------------------------------------


@dataclass
class Bench:
    """The shared parts of every cell: the model server's URL, the broker, the work per run."""

    model_url: str
    broker: str  # "filesystem://localhost//" or a redis:// URL
    calls: int = 5
    reads: int = 5
    delay: float = 2.0
    timeout: float = 600.0
    peers_python: str = ""
    log: Callable[[str], None] = print
    root: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="bench-conc-")))
    dbos_versions: dict[str, str] = field(default_factory=dict)

    @property
    def ideal_s(self) -> float:
        return self.calls * self.delay

    def measure(self, mode: Mode, runs: int) -> Cell:
        if mode.system == "dbos":
            return self.dbos(mode, runs)
        return self.runledger(mode, runs)

    # runledger ---------------------------------------------------------------------------------

    def runledger(self, mode: Mode, runs: int) -> Cell:
        cell = Cell(mode, runs)
        name = f"bench_conc_{mode.name}_{runs}_{uuid.uuid4().hex[:6]}"
        root = self.root / name
        env = {
            "RUNLEDGER_AGENT_MODULES": AGENT_MODULES,
            "ANTHROPIC_BASE_URL": self.model_url,
            "ANTHROPIC_API_KEY": "bench",
            "RUNLEDGER_LOG_FORMAT": "plain",
        }
        try:
            with (
                cell_database(name),
                Cluster(
                    root,
                    broker_url=self.broker,
                    lease_seconds=30.0,
                    sweep_seconds=10.0,
                    lost_after=300.0,
                    env=env,
                ) as cluster,
            ):
                args = [*mode.command(runs), "-n", f"{name}@%h", "-l", "info"]
                args += ["--without-mingle", "--without-gossip", "--without-heartbeat"]
                worker = cluster._spawn(args, name, {}, program=("runs.cli",))
                ready = wait_for(
                    lambda: (
                        cluster.log(name, tail=100000).count(" ready.") >= 2
                        or worker.poll() is not None
                    ),
                    timeout=180,
                    interval=0.2,
                )
                if not ready or worker.poll() is not None:
                    cell.skipped = "the worker did not start: " + cluster.log(name, tail=20)
                    return cell
                with Sampler(admin_url(), name, lambda: [worker.pid]) as sampler:
                    self._run_runledger(cell, cluster, mode)
                cell.peak_rss_mib = sampler.peak_rss_kib / 1024
                cell.peak_db_conns = sampler.peak_conns
                if worker.poll() is not None:
                    cell.note += f" the worker exited ({worker.returncode});"
                cell.note += worker_log_note(cluster.log(name, tail=10**7))
        finally:
            if self.broker.startswith("redis://"):
                with contextlib.suppress(Exception):
                    flush_redis(self.broker)
            shutil.rmtree(root, ignore_errors=True)
        return cell

    def _run_runledger(self, cell: Cell, cluster: Cluster, mode: Mode) -> None:
        from ledger import api

        inputs = {"calls": self.calls, "reads": self.reads, "model": inflight_agents.MODEL}
        started_at = timezone.now()
        started = time.perf_counter()
        with cluster.producing():
            ids = start_all(api, mode.agent, inputs, cell.runs, self.log)
        start_s = time.perf_counter() - started
        cell.start_rate = cell.runs / start_s if start_s > 0 else None
        final = Run.objects.filter(run_id__in=ids, status__in=FINAL_STATUSES)
        done = wait_for(lambda: final.count() == len(ids), timeout=self.timeout, interval=0.25)
        elapsed = time.perf_counter() - started
        succeeded = Run.objects.filter(run_id__in=ids, status=RunStatus.SUCCEEDED).count()
        cell.errors = len(ids) - succeeded
        last = final.aggregate(last=Max("finished_at"))["last"]
        if done and last is not None:
            cell.wall_s = max((last - started_at) / timedelta(seconds=1), 0.0)
        else:
            cell.wall_s = elapsed
            left = len(ids) - final.count()
            cell.note += f" timed out after {self.timeout:.0f} s ({left} unfinished);"
        bad = Run.objects.filter(run_id__in=ids).exclude(status=RunStatus.SUCCEEDED).first()
        if bad is not None:
            cell.note += f" e.g. a run {bad.status}: {str(bad.error or '')[:160]!r};"

    # DBOS --------------------------------------------------------------------------------------

    def dbos(self, mode: Mode, runs: int) -> Cell:
        cell = Cell(mode, runs)
        if not self.peers_python:
            cell.skipped = "no peers' virtualenv (--peers)"
            return cell
        name = f"bench_conc_dbos_{mode.name}_{runs}_{uuid.uuid4().hex[:6]}"
        url = database_url({**connection.settings_dict, "NAME": name})
        command = [self.peers_python, str(HERE / "concurrency_dbos.py"), "--url", url]
        command += ["--mode", mode.name, "--runs", str(runs), "--model-url", self.model_url]
        command += ["--calls", str(self.calls), "--reads", str(self.reads)]
        log = self.root / f"{name}.log"
        try:
            with open(log, "wb") as err:
                proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=err)
                with Sampler(admin_url(), name, lambda: [proc.pid]) as sampler:
                    try:
                        out, _ = proc.communicate(timeout=self.timeout + 120)
                    except subprocess.TimeoutExpired:
                        proc.kill()
                        out, _ = proc.communicate()
            answer: dict[str, Any] = {}
            with contextlib.suppress(ValueError, IndexError):
                answer = json.loads(out.decode().strip().splitlines()[-1])
            if "wall_s" not in answer:
                tail = log.read_text(errors="replace")[-600:]
                cell.skipped = f"DBOS did not run: {answer.get('error') or tail}"
                return cell
            cell.wall_s = answer["wall_s"]
            cell.start_rate = runs / answer["start_s"] if answer["start_s"] > 0 else None
            cell.errors = int(answer["errors"])
            if answer.get("error"):
                cell.note += f" e.g. {answer['error'][:160]!r};"
            cell.peak_rss_mib = sampler.peak_rss_kib / 1024
            cell.peak_db_conns = sampler.peak_conns
            self.dbos_versions = answer.get("versions", {})
        finally:
            with contextlib.suppress(Exception):
                _admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        return cell


def worker_log_note(text: str) -> str:
    """What a worker's log says went wrong, counted (nothing when nothing did)."""
    counts = {
        "refused connections (too many clients)": text.count("too many clients"),
        "ERROR lines": sum(1 for line in text.splitlines() if "ERROR" in line),
        "tracebacks": text.count("Traceback"),
    }
    seen = [f"{n} {what}" for what, n in counts.items() if n]
    return f" the worker's log: {', '.join(seen)};" if seen else ""


def start_all(
    api: Any, agent: str, inputs: dict[str, Any], runs: int, log: Callable[[str], None]
) -> list[str]:
    """Start ``runs`` runs of ``agent``: ``ledger.api.start_runs`` by the thousand if this
    runledger has it, else ``ledger.api.start_run`` one by one. Their ids."""
    batch = getattr(api, "start_runs", None)
    if batch is not None:
        ids: list[str] = []
        try:
            for first in range(0, runs, 1000):
                count = min(1000, runs - first)
                handles = batch([{"agent": agent, "inputs": inputs} for _ in range(count)])
                ids += [h.run_id for h in handles]
            return ids
        except TypeError as exc:
            log(f"# ledger.api.start_runs not understood ({exc}); starting one by one")
            if ids:
                raise
    return [api.start_run(agent, inputs).run_id for _ in range(runs)]


def alternate(ours: list[Mode], peers: list[Mode]) -> list[Mode]:
    """One of ours, one of the peer's, and so on (the machine's drift hits both alike)."""
    out: list[Mode] = []
    for i in range(max(len(ours), len(peers))):
        out += ours[i : i + 1] + peers[i : i + 1]
    return out
