"""The in-process bridge the CLI's tests use: the real app with its lifespan, through a sync client."""

from __future__ import annotations

from pathlib import Path

from servicekit import ADMIN, settings_for, wait_for

from api.client.rest import TideAPIError
from api.server.app import create_app
from api.server.testing import ASGIBridge, local_client


def test_a_sync_client_drives_the_real_app_in_process(tmp_path: Path) -> None:
    bridge = ASGIBridge(create_app(settings_for(tmp_path, None)))
    try:
        client = local_client(bridge, ADMIN)
        client.create_project({"name": "a", "deserved_gpus": 2})
        client.submit("a", {"name": "train", "workers": 1, "command": ["sleep", "1"]})
        wait_for(lambda: client.job("a", "train").allocated_gpus == 2, what="the loop to start the job")
        # node figures are physical: they show the GPUs once the replica's process holds them
        wait_for(lambda: client.cluster().allocated_gpus == 2, what="the node to show the job's GPUs")
        try:
            local_client(bridge, "wrong").projects()
        except TideAPIError as error:
            assert error.status_code == 401
        else:
            raise AssertionError("a wrong token was accepted")
    finally:
        bridge.close()
