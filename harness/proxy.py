"""A TCP proxy on loopback between workers and PostgreSQL that cuts connections on cue.

Workers get ``DATABASE_URL`` pointing at the proxy; every byte goes through two pump threads
per connection. A test cuts the line in one of two ways:

* ``cut_all()``: reset every open connection now (a network blip at a random moment);
* ``arm(Cut(...))``: reset the connection that sends the ``nth`` client message containing all
  of ``needles`` (e.g. an effect's intent write), at a chosen ``phase``:

  - ``before``: the message is dropped; the server never sees the statement (not committed);
  - ``during``: the message reaches the server, which executes and commits it (the engine's
    step writes are single autocommit statements), and the line is cut when the answer comes
    back, before the client reads it: the client cannot know whether it committed;
  - ``after``: the whole answer (up to ReadyForQuery) reaches the client, then the line is cut.

A cut shuts both sockets of the line down and closes them (``SO_LINGER`` 0): each end sees its
connection end mid-conversation, as when a middlebox or a route drops it. New connections are
accepted after a cut: the client reconnects as it would to a real server.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

PHASES = ("before", "during", "after")
_READY_FOR_QUERY = b"Z\x00\x00\x00\x05"


@dataclass
class Cut:
    needles: tuple[bytes, ...]
    nth: int = 1
    phase: str = "during"


class _Line:
    """One client connection and its upstream connection."""

    def __init__(self, client: socket.socket, server: socket.socket) -> None:
        self.client, self.server = client, server
        self.pending: str = ""  # "during" or "after": cut when the answer arrives
        self.closed = False
        self.lock = threading.Lock()

    def reset(self) -> None:
        with self.lock:
            if self.closed:
                return
            self.closed = True
        for sock in (self.client, self.server):
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            # shutdown first: close() alone would not wake the pump thread blocked in recv()
            # on this socket, and the socket would stay open (no one told) while it waits.
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                sock.close()


class Proxy:
    """Listens on 127.0.0.1 (a free port) and forwards to ``upstream`` (host, port)."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self._lines: list[_Line] = []
        self._lock = threading.Lock()
        self._cut: Cut | None = None
        self._seen = 0
        self.fired_at: float | None = None  # time.time() of the armed cut, once it happened
        self._stopped = False
        threading.Thread(target=self._accept, daemon=True, name=f"proxy-{self.port}").start()

    @classmethod
    def for_url(cls, database_url: str) -> Proxy:
        parts = urlsplit(database_url)
        return cls((parts.hostname or "127.0.0.1", parts.port or 5432))

    def url(self, database_url: str) -> str:
        """``database_url`` with its host and port replaced by this proxy's."""
        parts = urlsplit(database_url)
        auth = parts.netloc.rpartition("@")[0]
        netloc = f"{auth}@127.0.0.1:{self.port}" if auth else f"127.0.0.1:{self.port}"
        return urlunsplit(parts._replace(netloc=netloc))

    def arm(self, cut: Cut) -> None:
        with self._lock:
            self._cut, self._seen, self.fired_at = cut, 0, None

    def cut_all(self) -> int:
        """Reset every open connection; returns how many there were."""
        with self._lock:
            lines, self._lines = self._lines, []
        for line in lines:
            line.reset()
        return len(lines)

    def close(self) -> None:
        self._stopped = True
        with contextlib.suppress(OSError):
            self._listener.close()
        self.cut_all()

    def __enter__(self) -> Proxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- pumping ---------------------------------------------------------------------------

    def _accept(self) -> None:
        while not self._stopped:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.upstream, timeout=10)
                server.settimeout(None)
            except OSError:
                client.close()
                continue
            line = _Line(client, server)
            with self._lock:
                self._lines.append(line)
            threading.Thread(target=self._upstream, args=(line,), daemon=True).start()
            threading.Thread(target=self._downstream, args=(line,), daemon=True).start()

    def _upstream(self, line: _Line) -> None:
        """Client to server: where an armed cut looks for its statement."""
        while True:
            data = _recv(line.client)
            if not data:
                return line.reset()
            phase = self._match(data)
            if phase == "before":
                return self._fire(line)
            if phase:
                line.pending = phase
            if not _send(line.server, data):
                return line.reset()

    def _downstream(self, line: _Line) -> None:
        """Server to client: a pending cut happens when the answer to its statement comes."""
        while True:
            data = _recv(line.server)
            if not data:
                return line.reset()
            if line.pending == "during":
                return self._fire(line)
            if not _send(line.client, data):
                return line.reset()
            if line.pending == "after" and data.endswith(_READY_FOR_QUERY, 0, len(data) - 1):
                return self._fire(line)

    def _match(self, data: bytes) -> str:
        with self._lock:
            cut = self._cut
            if cut is None or not all(needle in data for needle in cut.needles):
                return ""
            self._seen += 1
            if self._seen != cut.nth:
                return ""
            self._cut = None
            return cut.phase

    def _fire(self, line: _Line) -> None:
        self.fired_at = time.time()
        line.reset()


def _recv(sock: socket.socket) -> bytes:
    try:
        return sock.recv(65536)
    except OSError:
        return b""


def _send(sock: socket.socket, data: bytes) -> bool:
    try:
        sock.sendall(data)
    except OSError:
        return False
    return True
