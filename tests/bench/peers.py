"""Peers side by side: DBOS Transact steps and LangGraph super-steps on the same PostgreSQL.

Run by `make bench` in its own virtualenv (.venv-peers), so the peers' dependencies never mix
with runledger's. Prints the median wall time of one durable step of each, and the ratio to one
INSERT+COMMIT measured here on the same database.

    python tests/bench/peers.py postgres://postgres@127.0.0.1:5432/postgres [steps]
"""

from __future__ import annotations

import statistics
import sys
import time
import uuid
from typing import Any, TypedDict

import psycopg


def floor(url: str, n: int = 1000) -> float:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS peers_floor (id integer, note text)")
        samples = []
        for i in range(n):
            t = time.perf_counter()
            conn.execute("INSERT INTO peers_floor VALUES (%s, %s)", [i, "x"])
            samples.append(time.perf_counter() - t)
        conn.execute("DROP TABLE peers_floor")
    return statistics.median(samples)


def dbos_step(url: str, steps: int) -> float:
    from dbos import DBOS

    DBOS(config={"name": "runledger-peer-bench", "system_database_url": url})  # type: ignore[typeddict-item]
    durations: list[float] = []

    @DBOS.step()
    def one(i: int) -> int:
        return i

    @DBOS.workflow()
    def many(n: int) -> int:
        total = 0
        for i in range(n):
            t = time.perf_counter()
            total += one(i)
            durations.append(time.perf_counter() - t)
        return total

    DBOS.launch()
    try:
        many(steps)
    finally:
        DBOS.destroy()
    return statistics.median(durations)


class State(TypedDict):
    i: int


def langgraph_superstep(url: str, steps: int) -> float:
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
        app.invoke({"i": 0}, config, durability="sync")
        return (time.perf_counter() - t) / steps


def main() -> None:
    url = sys.argv[1]
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 300
    base = floor(url)
    print(f"peers on {url.rsplit('@', 1)[-1]}: floor one INSERT+COMMIT {base * 1000:.3f} ms")
    for name, fn in (
        ("DBOS 3.x @DBOS.step", dbos_step),
        ("LangGraph PostgresSaver sync", langgraph_superstep),
    ):
        try:
            per = fn(url, steps)
        except Exception as exc:  # a peer that will not run here is reported, not hidden
            print(f"peer {name:<30} did not run: {type(exc).__name__}: {exc}")
            continue
        print(f"peer {name:<30} {per * 1000:7.3f} ms/step  ({per / base:4.1f}x floor)")


if __name__ == "__main__":
    main()
