"""A model provider on loopback that answers every call after a fixed delay (``make
bench-concurrency``): what a run waiting on a model looks like, without a model.

``POST /v1/messages`` answers in Anthropic's Messages format (what ``ledger.llm.AnthropicClient``
and the official SDK read, pointed here by ``ANTHROPIC_BASE_URL``) and ``POST
/v1/chat/completions`` in OpenAI's, each ``--delay`` seconds after the request was read. One
asyncio loop serves every connection (keep-alive or not), so thousands of calls can wait at once
for the price of a socket each. Standard library only: the peers' virtualenv can run it too.

    python harness/bench/slow_model.py --delay 2      # prints "port <n>", serves until killed
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys


def answer(path: str, body: dict[str, object]) -> dict[str, object]:
    """The JSON answer of one call; the text is the last words of the prompt, reversed."""
    model = str(body.get("model", "slow"))
    messages = body.get("messages") or [{}]
    last = messages[-1] if isinstance(messages, list) and messages else {}
    content = last.get("content", "") if isinstance(last, dict) else ""
    text = str(content)[-40:][::-1]
    usage = {"input_tokens": 10, "output_tokens": 10}
    if path.endswith("/chat/completions"):
        return {
            "id": "chatcmpl-slow",
            "object": "chat.completion",
            "created": 0,
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20},
        }
    return {
        "id": "msg_slow",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [{"type": "text", "text": text}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": usage,
    }


class SlowModel:
    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.calls = 0

    async def serve(self, host: str, port: int) -> asyncio.Server:
        return await asyncio.start_server(self._connection, host, port, backlog=4096)

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, path = lines[0].split(" ")[:2]
                headers = {}
                for line in lines[1:]:
                    if ":" in line:
                        key, value = line.split(":", 1)
                        headers[key.strip().lower()] = value.strip()
                raw = await reader.readexactly(int(headers.get("content-length", "0")))
                await asyncio.sleep(self.delay)
                self.calls += 1
                payload: dict[str, object]
                if method != "POST":
                    status, payload = "404 Not Found", {"error": f"no {method} {path}"}
                else:
                    try:
                        body = json.loads(raw or b"{}")
                    except ValueError:
                        body = {}
                    status, payload = "200 OK", answer(path, body)
                data = json.dumps(payload).encode()
                close = headers.get("connection", "").lower() == "close"
                writer.write(
                    f"HTTP/1.1 {status}\r\ncontent-type: application/json\r\n"
                    f"content-length: {len(data)}\r\n"
                    f"connection: {'close' if close else 'keep-alive'}\r\n\r\n".encode()
                    + data
                )
                await writer.drain()
                if close:
                    break
        except (asyncio.IncompleteReadError, ConnectionError, ValueError, IndexError):
            pass
        finally:
            writer.close()


async def _main(delay: float, port: int) -> None:
    server = await SlowModel(delay).serve("127.0.0.1", port)
    print(f"port {server.sockets[0].getsockname()[1]}", flush=True)
    async with server:
        await server.serve_forever()


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--delay", type=float, default=2.0, help="seconds before each answer")
    parser.add_argument("--port", type=int, default=0, help="0: a free port (printed)")
    args = parser.parse_args(argv)
    asyncio.run(_main(args.delay, args.port))


if __name__ == "__main__":
    main(sys.argv[1:])
