"""GetRun names the replica that owns a run and when its lease runs out, from the run's row."""

from __future__ import annotations

import dataclasses

from agentrt.server.api._convert import run_to_proto
from tests.unit.test_events_bus import BASE


def test_an_owned_run_shows_its_lease_owner_and_expiry() -> None:
    run = run_to_proto(dataclasses.replace(BASE, lease_owner="pod-b", lease_expires_ms=1_700_000_005_000))
    assert run.lease_owner == "pod-b"
    assert run.lease_expire_time.ToMilliseconds() == 1_700_000_005_000


def test_a_run_nobody_holds_shows_no_owner_and_no_expiry() -> None:
    run = run_to_proto(dataclasses.replace(BASE, lease_owner=None, lease_expires_ms=None))
    assert run.lease_owner == "" and not run.HasField("lease_expire_time")
