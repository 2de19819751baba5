"""The API's link to its engine process ends quietly however the other process goes away."""

from __future__ import annotations

import socket

from api.server.engine.wire import receive, send


def test_a_message_goes_through_whole() -> None:
    ours, theirs = socket.socketpair()
    with ours, theirs:
        send(theirs, ("status", {"role": "leader", "cycles": 3}))
        assert receive(ours) == ("status", {"role": "leader", "cycles": 3})


def test_the_other_end_closing_is_the_end() -> None:
    ours, theirs = socket.socketpair()
    with ours:
        send(theirs, ("wake",))
        theirs.close()
        assert receive(ours) == ("wake",)
        assert receive(ours) is None


def test_the_other_end_closing_with_our_messages_unread_is_the_end_too() -> None:
    """What a stopping engine process does: it exits with a wake of the API's unread; the kernel resets."""
    ours, theirs = socket.socketpair()
    with ours:
        send(ours, ("wake",))  # never read by the other end
        theirs.close()
        assert receive(ours) is None  # was ConnectionResetError, logged from the tide-engine-link thread
