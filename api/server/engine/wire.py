"""Messages between ``tide serve``'s API process and its engine process, over a private socket pair.

Contract: ``send(sock, message)`` writes one message (any picklable value: tuples of plain values here) as a
4-byte big-endian length and its pickle; ``receive(sock)`` reads one, or returns None once the other
process closed its end or died: at end of file, and on a reset (a process that closes with messages
unread, as one stopping does, resets the connection instead of ending it), never raising for either. The socket is a ``socketpair`` made by the API process for the one
child it starts (``api.server.engine.link``), never a listening socket, so both ends are the same program and
pickle carries nothing foreign. ``Sender`` serialises writers of several threads on one socket.

The messages (``api.server.engine.link`` sends the first three, ``api.server.engine.host`` the last two):

- ``("settings", Settings, log_level, log_format)``: first, once;
- ``("wake",)``: an API write wants a cycle soon; ``("stop",)``: end after the current cycle;
- ``("call", id, name, args)``: run ``read_log`` or ``metrics`` there, answered by ``("reply", id, ok, value)``;
- ``("status", dict)``: the engine's role, counters and last error (``EngineStatus`` fields), after each
  of its write transactions and cycles, and once when its first cycle is done.
"""

from __future__ import annotations

import pickle
import socket
import struct
import threading

HEADER = struct.Struct("!I")


def send(sock: socket.socket, message: object) -> None:
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


def receive(sock: socket.socket) -> object | None:
    head = _exactly(sock, HEADER.size)
    if head is None:
        return None
    body = _exactly(sock, HEADER.unpack(head)[0])
    return None if body is None else pickle.loads(body)  # our own child, on a private socket


class Sender:
    """One socket written from several threads: each message goes out whole."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._lock = threading.Lock()

    def __call__(self, message: object) -> bool:
        """Send; False when the other end is gone (its death is handled by whoever reads)."""
        try:
            with self._lock:
                send(self.sock, message)
        except OSError:
            return False
        return True
