"""``python -m api.server.engine.host --fd N --parent PID``: ``tide serve``'s scheduling engine, in a process of its own.

Contract: started by ``api.server.engine.link`` with one end of a socket pair (``api.server.engine.wire``), it reads its settings,
builds the executor, the database pool and the ``Engine`` (leader election, adoption, cycles), runs one
cycle, says so, then runs the loop until told to stop. A cycle (a database load, ``plan_cycle``, a persist)
holds this process's interpreter for tens of milliseconds at 1,000 jobs; here it never delays an API
request. It dies with its parent: the kernel kills it when the parent dies (``PR_SET_PDEATHSIG``; it exits at
once if the parent is already gone), and the end of the socket stops the loop too. SIGINT is the parent's
to handle (a terminal sends it to both); SIGTERM, or ``Stop()`` from the parent, ends the loop after the
current cycle without stopping replicas (a restarted service adopts them), releases leadership and closes
the executor. Messages in: ``Wake`` (``Engine.trigger``), ``Stop``, ``Call`` (``read_log`` through the
executor, ``metrics``: the engine's Prometheus text), each call answered (``Reply``) from a small thread
pool so a long cycle never delays it. Messages out: ``Status`` (role, counters, last error) after each write
transaction and each cycle, the first with ``ready`` once the first cycle is done.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import signal
import socket
import threading
from concurrent.futures import ThreadPoolExecutor

from prometheus_client import CollectorRegistry, generate_latest

from api.server import heap
from api.server.engine.wire import Call, Reply, Sender, Start, Status, Stop, Wake, receive
from api.server.logs import configure_logging
from api.server.parts import build_executor, build_leadership, close_executor, engine_settings
from api.server.settings import Settings
from scheduler.engine.lifeline import die_with_parent
from scheduler.engine.loop import Engine
from scheduler.engine.metrics import EngineMetrics
from scheduler.store.db import Database

ENGINE_GC_THRESHOLDS = (50_000, 50, 100)
# The C heap: two malloc arenas for the engine's few threads, and free pages given back each minute (a
# trim of a 100 MiB heap takes about a millisecond; ``api.server.heap`` says why).
MALLOC_ARENAS = 2
HEAP_TRIM_SECONDS = 60.0


def status_of(engine: Engine, *, ready: bool) -> Status:
    return Status(
        role=engine.role,
        cycles=engine.cycles,
        changes=engine.changes,
        placements=engine.placements,
        node_rows=engine.node_rows,
        last_cycle_at=engine.last_cycle_at,
        last_cycle_seconds=engine.last_cycle_seconds,
        last_error=engine.last_error,
        ready=ready,
        leading_since=engine.leading_since,
    )


def tune_engine_process() -> None:
    """After the first cycle: what startup built is never garbage, so full collections skip it (``freeze``);
    and the collector runs far less often. A cycle at 10,240 GPUs allocates and frees ~10^6 objects (rows,
    the snapshot, the plan); at the default thresholds the collector ran a full collection every other
    cycle (80-120 ms each) and young ones thousands of times a cycle (``bench/live_cycle.py`` measures it)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*ENGINE_GC_THRESHOLDS)


class Host:
    """The engine, its executor and database, and the socket to the API process."""

    def __init__(self, sock: socket.socket, settings: Settings) -> None:
        self.sock = sock
        self.send = Sender(sock)
        self.registry = CollectorRegistry()
        self.db = Database(
            settings.resolved_database_url(), pool=settings.database_pool
        )  # migrated by the API
        self.executor = build_executor(settings)
        self.ready = False
        self.engine = Engine(
            self.db,
            self.executor,
            engine_settings(settings),
            leadership=build_leadership(settings, self.db),
            metrics=EngineMetrics(self.registry),
            on_change=self.publish,
        )
        self.calls = ThreadPoolExecutor(max_workers=2, thread_name_prefix="tide-engine-call")
        self.trimmer = heap.Trimmer(HEAP_TRIM_SECONDS)

    def publish(self) -> None:
        self.send(status_of(self.engine, ready=self.ready))

    def listen(self) -> None:
        """Read the parent's messages until it stops us or goes away."""
        while True:
            message = receive(self.sock)
            if message is None or isinstance(message, Stop):
                self.engine.stop()
                return
            if isinstance(message, Wake):
                self.engine.trigger()
            elif isinstance(message, Call):
                self.calls.submit(self.answer, message)

    def answer(self, call: Call) -> None:
        try:
            if call.name == "read_log":
                value: object = self.executor.read_log(*call.args)
            elif call.name == "metrics":
                value = generate_latest(self.registry).decode()
            else:
                raise ValueError(f"unknown call {call.name!r}")
        except Exception as error:  # the caller gets the error; this process goes on
            self.send(Reply(call.id, False, f"{type(error).__name__}: {error}"))
        else:
            self.send(Reply(call.id, True, value))

    async def run(self) -> None:
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, self.engine.stop)
        threading.Thread(target=self.listen, name="tide-engine-listen", daemon=True).start()
        await self.engine.turn()  # lead (or not) and know the nodes before the API serves
        self.ready = True
        self.publish()
        tune_engine_process()
        self.trimmer.start()
        await self.engine.run()

    def close(self) -> None:
        self.trimmer.stop()
        self.engine.close()
        self.calls.shutdown(wait=False, cancel_futures=True)
        self.db.dispose()
        close_executor(self.executor)
        self.publish()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--fd", type=int, required=True)
    parser.add_argument("--parent", type=int, required=True)
    args = parser.parse_args()
    die_with_parent(args.parent)
    heap.limit_arenas(MALLOC_ARENAS)  # before any thread starts
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the parent, which stops us
    os.set_inheritable(args.fd, False)  # replicas must not hold it: the parent would never see it close
    sock = socket.socket(fileno=args.fd)
    first = receive(sock)
    if not isinstance(first, Start):
        raise SystemExit("tide engine: expected the settings first")
    configure_logging(first.log_level, first.log_format)
    host = Host(sock, first.settings)
    try:
        asyncio.run(host.run())
    finally:
        host.close()


if __name__ == "__main__":
    main()
