"""The no-server broker: kombu's filesystem transport, publishing each message whole.

kombu's filesystem transport creates a message's file and then writes into it; a worker polling
the folder can take the file in between and read it empty. Seen here under load: the worker
stops with "Unrecoverable error: JSONDecodeError". This transport writes a hidden temporary file
and renames it into place (atomic on POSIX), so a consumer only ever sees whole messages.
Settings select it for ``filesystem://`` URLs (``CELERY_BROKER_TRANSPORT``).
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from time import monotonic
from typing import Any

from kombu.exceptions import ChannelError
from kombu.transport import filesystem
from kombu.utils.encoding import str_to_bytes
from kombu.utils.json import dumps

TRANSPORT = "runs.brokers:FilesystemTransport"


class FilesystemChannel(filesystem.Channel):
    def _put(self, queue: str, message: Any, **kwargs: Any) -> None:  # type: ignore[override]
        # The name sorts by time like kombu's; the temporary one starts with a dot, so kombu's
        # consumer (which matches "<time>_<uuid>.<queue>.msg") never picks it up.
        name = f"{round(monotonic() * 1000)}_{uuid.uuid4()}.{queue}.msg"
        final = os.path.join(self.data_folder_out, name)
        temp = os.path.join(self.data_folder_out, f".{name}.part")
        try:
            with open(temp, "wb") as f:
                f.write(str_to_bytes(dumps(message)))
            os.replace(temp, final)
        except OSError as exc:
            raise ChannelError(f"Cannot add file {final!r} to directory") from exc


class FilesystemTransport(filesystem.Transport):
    Channel = FilesystemChannel


def filesystem_options(broker_dir: Path, *, polling_interval: float = 0.2) -> dict[str, object]:
    """The filesystem transport rooted at ``broker_dir`` (created if missing).

    Every process that uses the same directory shares the queues: a producer renames one file
    per message into the folder and a consumer takes it by renaming it away (one consumer wins).
    """
    for sub in ("out", "processed", "control"):
        (broker_dir / sub).mkdir(parents=True, exist_ok=True)
    return {
        "data_folder_in": str(broker_dir / "out"),
        "data_folder_out": str(broker_dir / "out"),
        "processed_folder": str(broker_dir / "processed"),
        "control_folder": str(broker_dir / "control"),  # kombu's default is ./control
        "store_processed": False,
        # How often an idle worker looks for new files (kombu's default is 1 s).
        "polling_interval": polling_interval,
    }
