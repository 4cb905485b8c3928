"""DBOS Transact's side of ``make bench-concurrency``, in the peers' virtualenv (.venv-peers).

One process per measurement, as one DBOS application: ``--runs`` workflows started at once
(``DBOS.start_workflow`` in a loop, or ``await DBOS.start_workflow_async`` for ``--mode async``),
each making ``--calls`` model calls (one ``@DBOS.step`` each, an HTTP POST to the loopback model
server, urllib for sync and httpx for async) with a durable read step (``@DBOS.step``) after each,
then every result awaited. DBOS's own defaults (its unbounded executor, its connection pool).
The caller (``harness.bench.concurrency``) samples this process's memory and its connections.

Prints one JSON line: ``{"start_s", "wall_s", "errors", "error", "versions"}``.

    .venv-peers/bin/python harness/bench/concurrency_dbos.py --url postgres://... \\
        --mode sync --runs 100 --model-url http://127.0.0.1:PORT
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
import urllib.request
from typing import Any

BODY = {"model": "claude-bench-slow", "max_tokens": 64, "messages": []}


def _request(prompt: str) -> bytes:
    return json.dumps({**BODY, "messages": [{"role": "user", "content": prompt}]}).encode()


def _versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    found = {}
    for name in ("dbos", "httpx", "psycopg", "sqlalchemy"):
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            found[name] = "absent"
    return found


def measure(args: argparse.Namespace) -> dict[str, Any]:
    from dbos import DBOS

    url = args.model_url.rstrip("/") + "/v1/messages"
    headers = {"content-type": "application/json", "x-api-key": "bench"}
    DBOS(config={"name": "runledger-concurrency-bench", "system_database_url": args.url})  # type: ignore[typeddict-item]

    @DBOS.step()
    def model_call(prompt: str) -> dict[str, Any]:
        req = urllib.request.Request(url, data=_request(prompt), headers=headers)
        with urllib.request.urlopen(req, timeout=120) as response:
            return json.loads(response.read())  # type: ignore[no-any-return]

    @DBOS.step()
    def read(i: int) -> dict[str, int]:
        return {"i": i}

    @DBOS.workflow()
    def run(calls: int, reads: int) -> int:
        for i in range(max(calls, reads)):
            if i < calls:
                model_call(f"call {i} of a run in flight")
            if i < reads:
                read(i)
        return calls + reads

    client: Any = None

    @DBOS.step()
    async def model_call_async(prompt: str) -> dict[str, Any]:
        response = await client.post(url, content=_request(prompt), headers=headers)
        response.raise_for_status()
        return response.json()  # type: ignore[no-any-return]

    @DBOS.step()
    async def read_async(i: int) -> dict[str, int]:
        return {"i": i}

    @DBOS.workflow()
    async def run_async(calls: int, reads: int) -> int:
        for i in range(max(calls, reads)):
            if i < calls:
                await model_call_async(f"call {i} of a run in flight")
            if i < reads:
                await read_async(i)
        return calls + reads

    DBOS.launch()
    errors: list[str] = []
    try:
        if args.mode == "sync":
            started = time.perf_counter()
            handles = [DBOS.start_workflow(run, args.calls, args.reads) for _ in range(args.runs)]
            start_s = time.perf_counter() - started
            for handle in handles:
                try:
                    handle.get_result()
                except Exception as exc:
                    errors.append(f"{type(exc).__name__}: {exc}")
            wall_s = time.perf_counter() - started
        else:

            async def main() -> tuple[float, float]:
                nonlocal client
                import httpx

                limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
                client = httpx.AsyncClient(limits=limits, timeout=120)
                started = time.perf_counter()
                handles = [
                    await DBOS.start_workflow_async(run_async, args.calls, args.reads)
                    for _ in range(args.runs)
                ]
                start_s = time.perf_counter() - started
                results = await asyncio.gather(
                    *(h.get_result() for h in handles), return_exceptions=True
                )
                wall_s = time.perf_counter() - started
                errors.extend(
                    f"{type(r).__name__}: {r}" for r in results if isinstance(r, BaseException)
                )
                await client.aclose()
                return start_s, wall_s

            start_s, wall_s = asyncio.run(main())
    finally:
        DBOS.destroy()
    return {
        "start_s": start_s,
        "wall_s": wall_s,
        "errors": len(errors),
        "error": errors[0] if errors else "",
        "versions": _versions(),
    }


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True, help="DBOS's system database (created if absent)")
    parser.add_argument("--mode", choices=("sync", "async"), default="sync")
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--calls", type=int, default=5)
    parser.add_argument("--reads", type=int, default=5)
    parser.add_argument("--model-url", required=True)
    args = parser.parse_args(argv)
    out = os.fdopen(os.dup(sys.stdout.fileno()), "w")
    sys.stdout = sys.stderr  # DBOS's own output must not corrupt the answer line
    try:
        answer = measure(args)
    except Exception as exc:  # a peer that will not run here is reported, not hidden
        answer = {"errors": args.runs, "error": f"{type(exc).__name__}: {exc}"}
    out.write(json.dumps(answer) + "\n")
    out.flush()


if __name__ == "__main__":
    main(sys.argv[1:])
