"""Peers side by side: DBOS Transact steps and LangGraph super-steps on the same PostgreSQL.

Run by `make bench` in its own virtualenv (.venv-peers), so the peers' dependencies never mix
with runledger's. ``manage.py bench_engine --peers .venv-peers/bin/python`` starts this script
once in ``--serve`` mode and asks it for one peer figure at a time, alternating with its own
rounds, so that the machine's drift hits runledger and the peers alike. Each request is one line
on stdin (``dbos 1000``, ``langgraph-sync 1000``, ``langgraph-exit 1000``, ``floor 400``,
``quit``); each answer is one JSON line on stdout: ``{"name": ..., "ms_per_step": ...}`` or
``{"name": ..., "error": ...}`` for a peer that will not run here.

By hand, one round of each:

    python harness/bench/peers.py postgres://postgres@127.0.0.1:5432/postgres [steps]
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
import uuid
from typing import Any, TypedDict, cast

import psycopg


def floor(url: str, n: int = 400) -> float:
    """Median seconds of one INSERT+COMMIT (autocommit) on this database."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS peers_floor (id integer, note text)")
        samples = []
        for i in range(n):
            t = time.perf_counter()
            conn.execute("INSERT INTO peers_floor VALUES (%s, %s)", [i, "x"])
            samples.append(time.perf_counter() - t)
        conn.execute("DROP TABLE peers_floor")
    return statistics.median(samples)


class Dbos:
    """DBOS Transact launched once; each round is one workflow of ``steps`` ``@DBOS.step``s."""

    def __init__(self, url: str) -> None:
        from dbos import DBOS

        self._dbos = DBOS
        self.durations: list[float] = []
        DBOS(config={"name": "runledger-peer-bench", "system_database_url": url})  # type: ignore[typeddict-item]

        @DBOS.step()
        def one(i: int) -> int:
            return i

        @DBOS.workflow()
        def many(n: int) -> int:
            total = 0
            for i in range(n):
                t = time.perf_counter()
                total += one(i)
                self.durations.append(time.perf_counter() - t)
            return total

        self._many = many
        DBOS.launch()

    def round(self, steps: int) -> float:
        """Median seconds of one durable step inside a ``steps``-step workflow."""
        self.durations.clear()
        self._many(steps)
        return statistics.median(self.durations)

    def close(self) -> None:
        self._dbos.destroy()


class State(TypedDict):
    i: int


def langgraph_superstep(url: str, steps: int, durability: str) -> float:
    """Seconds per super-step of a ``steps``-super-step loop checkpointed by PostgresSaver."""
    from langgraph.checkpoint.postgres import PostgresSaver
    from langgraph.graph import END, START, StateGraph

    graph = StateGraph(State)
    graph.add_node("inc", lambda s: {"i": s["i"] + 1})
    graph.add_edge(START, "inc")
    graph.add_conditional_edges("inc", lambda s: END if s["i"] >= steps else "inc")
    with PostgresSaver.from_conn_string(url) as saver:
        saver.setup()
        app = graph.compile(checkpointer=saver)
        config: Any = {
            "configurable": {"thread_id": uuid.uuid4().hex},
            "recursion_limit": steps + 10,
        }
        t = time.perf_counter()
        app.invoke({"i": 0}, config, durability=cast(Any, durability))
        return (time.perf_counter() - t) / steps


def _versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    found = {}
    for name in ("dbos", "langgraph", "langgraph-checkpoint-postgres", "psycopg"):
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            found[name] = "absent"
    return found


class Peers:
    def __init__(self, url: str) -> None:
        self.url = url
        self._dbos: Dbos | None = None

    def measure(self, name: str, steps: int) -> float:
        if name == "floor":
            return floor(self.url, steps)
        if name == "dbos":
            if self._dbos is None:
                self._dbos = Dbos(self.url)
            return self._dbos.round(steps)
        if name in ("langgraph-sync", "langgraph-exit"):
            return langgraph_superstep(self.url, steps, name.split("-", 1)[1])
        raise ValueError(f"unknown peer {name!r}")

    def answer(self, name: str, steps: int) -> dict[str, Any]:
        try:
            return {"name": name, "ms_per_step": self.measure(name, steps) * 1000}
        except Exception as exc:  # a peer that will not run here is reported, not hidden
            return {"name": name, "error": f"{type(exc).__name__}: {exc}"}

    def close(self) -> None:
        if self._dbos is not None:
            self._dbos.close()


def serve(url: str) -> None:
    """Answer requests from stdin until ``quit``; the peers' own logging goes to stderr."""
    out = os.fdopen(os.dup(sys.stdout.fileno()), "w")
    sys.stdout = sys.stderr  # a peer that prints must not corrupt the answer stream
    peers = Peers(url)
    _send(out, {"name": "versions", **_versions()})
    try:
        for line in sys.stdin:
            words = line.split()
            if not words or words[0] == "quit":
                break
            _send(out, peers.answer(words[0], int(words[1]) if len(words) > 1 else 1000))
    finally:
        peers.close()


def _send(out: Any, answer: dict[str, Any]) -> None:
    out.write(json.dumps(answer) + "\n")
    out.flush()


def main(argv: list[str]) -> None:
    if argv[:1] == ["--serve"]:
        serve(argv[1])
        return
    url, steps = argv[0], int(argv[1]) if len(argv) > 1 else 300
    peers = Peers(url)
    base = peers.measure("floor", 400)
    print(f"floor one INSERT+COMMIT: {base * 1000:.3f} ms")
    try:
        for name in ("dbos", "langgraph-sync", "langgraph-exit"):
            answer = peers.answer(name, steps)
            print(f"{name}: {answer.get('ms_per_step', answer.get('error'))} ms/step")
    finally:
        peers.close()


if __name__ == "__main__":
    main(sys.argv[1:])
