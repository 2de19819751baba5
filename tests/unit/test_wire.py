"""The API's link to its engine process ends quietly however the other process goes away."""

from __future__ import annotations

import pickle
import socket
import struct

import pytest

from api.server.engine.link import EngineLink
from api.server.engine.wire import Call, Reply, Status, Wake, receive, send
from api.server.settings import Settings


def test_a_message_goes_through_whole() -> None:
    ours, theirs = socket.socketpair()
    with ours, theirs:
        status = Status("leader", 3, 7, 12.5, 0.02, None, ready=True, leading_since=10.0)
        send(theirs, status)
        assert receive(ours) == status


def test_the_other_end_closing_is_the_end() -> None:
    ours, theirs = socket.socketpair()
    with ours:
        send(theirs, Wake())
        theirs.close()
        assert receive(ours) == Wake()
        assert receive(ours) is None


def test_the_other_end_closing_with_our_messages_unread_is_the_end_too() -> None:
    """What a stopping engine process does: it exits with a wake of the API's unread; the kernel resets."""
    ours, theirs = socket.socketpair()
    with ours:
        send(ours, Wake())  # never read by the other end
        theirs.close()
        assert receive(ours) is None  # was ConnectionResetError, logged from the tide-engine-link thread


def test_each_message_kind_comes_back_as_it_went() -> None:
    ours, theirs = socket.socketpair()
    with ours, theirs:
        for message in (Call(1, "read_log", ("p", "j", 0, None)), Reply(1, False, "ValueError: no")):
            send(theirs, message)
            assert receive(ours) == message


def test_anything_else_is_refused() -> None:
    ours, theirs = socket.socketpair()
    with ours, theirs:
        data = pickle.dumps(("wake",))
        theirs.sendall(struct.pack("!I", len(data)) + data)
        with pytest.raises(TypeError, match="not a message"):
            receive(ours)


def test_the_link_moves_placements_only_when_the_engine_did() -> None:
    """``EngineLink`` (the API's handle on the engine process) counts the engine's ``placements`` (what
    ``GET /cluster``'s nodes are kept by) apart from its ``changes``, each moving when the engine's moved."""
    link = EngineLink(Settings())

    def status(changes: int, placements: int) -> Status:
        return Status("leader", 1, changes, None, None, None, ready=False, placements=placements)

    link._update(status(1, 1))
    changes, placements = link.changes, link.placements
    link._update(status(2, 1))  # a note, a fair share: not what nodes show
    assert (link.changes, link.placements) == (changes + 1, placements)
    link._update(status(3, 2))
    assert (link.changes, link.placements) == (changes + 2, placements + 1)
    link._update(status(3, 2))  # the same status again
    assert (link.changes, link.placements) == (changes + 2, placements + 1)


def test_the_link_moves_node_rows_only_when_the_engine_wrote_nodes() -> None:
    """The engine's ``node_rows`` (what a submit's fit warning keys its cached node sizes on) moves apart
    from ``placements``: a cycle that placed replicas moves the one, a node synced both."""
    link = EngineLink(Settings())

    def status(placements: int, node_rows: int) -> Status:
        return Status(
            "leader", 1, 1, None, None, None, ready=False, placements=placements, node_rows=node_rows
        )

    link._update(status(1, 1))
    placements, node_rows = link.placements, link.node_rows
    link._update(status(2, 1))  # replicas placed
    assert (link.placements, link.node_rows) == (placements + 1, node_rows)
    link._update(status(3, 2))  # a node synced
    assert (link.placements, link.node_rows) == (placements + 2, node_rows + 1)
