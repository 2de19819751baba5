"""The ``tide`` command (``api.client.cli.main``).

httpx imports its own command line client when click, rich and pygments are installed, as they are with
Tide: about 40 ms of every command's start (a fifth; bench/cli_start.py), for a client Tide never runs. A
``None`` entry in ``sys.modules`` makes that optional import fail as httpx expects when its ``cli`` extra is
absent (it defines a stand-in ``httpx.main``); set only when httpx's client was not imported already.
"""

import sys

sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]
