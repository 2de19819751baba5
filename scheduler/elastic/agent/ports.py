"""A free TCP port.

Contract: ``free_port(host)`` binds port 0 on ``host`` (IPv4, or IPv6 when ``host`` has a colon), reads the
port the kernel chose and closes the socket: the port was free a moment ago, and a caller that binds it
right away (a rendezvous, a test server) almost always gets it. Standard library only (warm launchers
import it).
"""

from __future__ import annotations

import socket


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])
