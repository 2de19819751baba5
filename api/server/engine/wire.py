"""Messages between ``tide serve``'s API process and its engine process, over a private socket pair.

Contract: ``send(sock, message)`` writes one ``Message`` as a 4-byte big-endian length and its pickle;
``receive(sock)`` reads one, or returns None once the other process closed its end or died: at end of
file, and on a reset (a process that closes with messages unread, as one stopping does, resets the
connection instead of ending it), never raising for either; a value that is not a ``Message`` is a
``TypeError``. The socket is a ``socketpair`` made by the API process for the one child it starts
(``api.server.engine.link``), never a listening socket, so both ends are the same program and pickle
carries nothing foreign. ``Sender`` serialises writers of several threads on one socket.

The messages, one frozen dataclass each (``api.server.engine.link`` sends the first four,
``api.server.engine.host`` the last two):

- ``Start(settings, log_level, log_format)``: first, once;
- ``Wake()``: an API write wants a cycle soon; ``Stop()``: end after the current cycle;
- ``Call(id, name, args)``: run ``read_log`` or ``metrics`` there, answered by ``Reply(id, ok, value)``
  (``value`` is the error's text when not ``ok``);
- ``Status(...)``: the engine's role, counters and last error, after each of its write transactions and
  cycles, and once when its first cycle is done (``ready``).
"""

from __future__ import annotations

import pickle
import socket
import struct
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from api.server.settings import Settings


@dataclass(frozen=True)
class Start:
    settings: Settings
    log_level: str
    log_format: str


@dataclass(frozen=True)
class Wake:
    pass


@dataclass(frozen=True)
class Stop:
    pass


@dataclass(frozen=True)
class Call:
    id: int
    name: str
    args: tuple[Any, ...]


@dataclass(frozen=True)
class Reply:
    id: int
    ok: bool
    value: Any


@dataclass(frozen=True)
class Status:
    role: str
    cycles: int
    changes: int
    last_cycle_at: float | None
    last_cycle_seconds: float | None
    last_error: str | None
    ready: bool
    leading_since: float | None = None
    placements: int = 0  # ``Engine.placements``
    node_rows: int = 0  # ``Engine.node_rows``


Message = Start | Wake | Stop | Call | Reply | Status
MESSAGES = (Start, Wake, Stop, Call, Reply, Status)

HEADER = struct.Struct("!I")


def send(sock: socket.socket, message: Message) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    sock.sendall(HEADER.pack(len(data)) + data)


def _exactly(sock: socket.socket, size: int) -> bytes | None:
    chunks, left = [], size
    while left:
        try:
            chunk = sock.recv(min(left, 1 << 20))
        except ConnectionError:  # it closed with messages of ours unread (it was stopping): its end, too
            return None
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def receive(sock: socket.socket) -> Message | None:
    head = _exactly(sock, HEADER.size)
    if head is None:
        return None
    body = _exactly(sock, HEADER.unpack(head)[0])
    if body is None:
        return None
    message = pickle.loads(body)  # our own child, on a private socket
    if not isinstance(message, MESSAGES):
        raise TypeError(f"not a message of the engine link: {type(message).__name__}")
    return message


class Sender:
    """One socket written from several threads: each message goes out whole."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._lock = threading.Lock()

    def __call__(self, message: Message) -> bool:
        """Send; False when the other end is gone (its death is handled by whoever reads)."""
        try:
            with self._lock:
                send(self.sock, message)
        except OSError:
            return False
        return True
