"""Per-instance caps at the gateway (issue 14 finding 9): one more stream than an instance may
have is refused with a clear 429, and the ones that are open keep working; a terminated
instance's answer does not tell a caller without a valid token why it ended (finding 11)."""

from __future__ import annotations

from contextlib import AsyncExitStack
from pathlib import Path

import pytest
import trio

from devyard.core import UpgradeRejected, open_transport
from devyard.server.edge.gateway import DEFAULT_MAX_STREAMS

from .conftest import open_gateway_rig, upgrade_refusal


async def test_streams_beyond_the_cap_are_refused(tmp_path: Path) -> None:
    async with open_gateway_rig(tmp_path, raw=True) as rig:
        instance = await rig.create("android")
        instance_id, token = instance["metadata"]["id"], instance["status"]["token"]
        url = f"tcp://127.0.0.1:{rig.bound.link_port}/v1/instances/{instance_id}/adb"
        headers = [(b"authorization", f"Bearer {token}".encode())]
        with trio.fail_after(30):
            async with AsyncExitStack() as stack:
                for _ in range(DEFAULT_MAX_STREAMS):
                    await stack.enter_async_context(open_transport(url, extra_headers=headers))
                with pytest.raises(UpgradeRejected) as refused:
                    async with open_transport(url, extra_headers=headers):
                        pass
                assert refused.value.status_code == 429
                assert b"too_many_streams" in refused.value.body
            while True:  # all closed: there is room again, once the gateway saw them go
                try:
                    async with open_transport(url, extra_headers=headers):
                        break
                except UpgradeRejected as again:
                    assert again.status_code == 429
                    await trio.sleep(0.05)
        await rig.delete(instance)
        status, body = await upgrade_refusal(
            instance["status"]["adbWebSocketUrl"], {"Authorization": "Bearer not-the-token"}
        )
        assert status == 410
        assert "UserRequested" not in body["message"], "no reason without a valid token"
