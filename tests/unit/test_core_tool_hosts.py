"""Routing tools to hosts as listings change, and the re-list backoff (core/_tool_hosts.py)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from agentrt.server.core import ToolErrorCode, tool_hosts

Conflict, RelistPolicy = tool_hosts.Conflict, tool_hosts.RelistPolicy
plan_routes, relist_delay_s = tool_hosts.plan_routes, tool_hosts.relist_delay_s


def test_first_listings_route_each_tool_to_the_first_host_that_lists_it() -> None:
    plan = plan_routes({}, {"a": ["x", "y"], "b": ["y", "z"]})
    assert plan.routes == {"x": "a", "y": "a", "z": "b"}
    assert plan.added == ("x", "y", "z") and plan.removed == () and plan.moved == ()
    assert plan.conflicts == (Conflict(tool="y", kept="a", refused="b"),)


def test_a_tool_stays_with_its_host_when_another_host_appears_listing_it() -> None:
    plan = plan_routes({"y": "b"}, {"a": ["y"], "b": ["y"]})
    assert plan.routes == {"y": "b"}
    assert plan.conflicts == (Conflict(tool="y", kept="b", refused="a"),)


def test_a_tool_a_host_no_longer_lists_is_removed_or_moves_to_a_host_that_does() -> None:
    plan = plan_routes({"x": "a", "y": "a"}, {"a": ["x"], "b": ["y"]})
    assert plan.routes == {"x": "a", "y": "b"}
    assert plan.moved == ("y",) and plan.removed == () and plan.conflicts == ()
    gone = plan_routes({"x": "a", "y": "a"}, {"a": ["x"]})
    assert gone.routes == {"x": "a"} and gone.removed == ("y",)


def test_a_host_removed_takes_its_tools_with_it() -> None:
    plan = plan_routes({"x": "a", "z": "b"}, {"b": ["z"]})
    assert plan.routes == {"z": "b"} and plan.removed == ("x",)


@given(
    st.dictionaries(st.sampled_from("abc"), st.lists(st.sampled_from("tuvwxyz"), unique=True)),
    st.dictionaries(st.sampled_from("tuvwxyz"), st.sampled_from("abc")),
)
def test_every_route_is_to_a_host_that_lists_the_tool_and_every_listed_tool_is_routed(
    listings: dict[str, list[str]], current: dict[str, str]
) -> None:
    plan = plan_routes(current, listings)
    assert all(tool in listings[host] for tool, host in plan.routes.items())
    assert set(plan.routes) == {tool for tools in listings.values() for tool in tools}
    # Nothing moves while its host still lists it.
    assert all(plan.routes[t] == h for t, h in current.items() if t in listings.get(h, ()))


def test_the_relist_backoff_doubles_to_its_cap_with_jitter_and_never_spins() -> None:
    policy = RelistPolicy(every_s=30.0, base_s=0.2, cap_s=5.0)
    assert relist_delay_s(failures=0, policy=policy, rand=0.5) == 30.0
    assert relist_delay_s(failures=1, policy=policy, rand=0.999) < 0.2
    assert relist_delay_s(failures=3, policy=policy, rand=0.5) == 0.4
    assert relist_delay_s(failures=50, policy=policy, rand=0.999) < 5.0
    assert relist_delay_s(failures=4, policy=policy, rand=0.0) == 0.02  # a tenth of base at least


def test_a_pending_call_waits_connect_s_per_attempt_within_the_run_deadline() -> None:
    wait = tool_hosts.pending_call_wait_s
    assert wait(connect_s=5.0, attempts=3, now_s=100.0, run_deadline_s=200.0, reserve_s=0.2) == 15.0
    assert wait(connect_s=5.0, attempts=3, now_s=100.0, run_deadline_s=110.0, reserve_s=0.5) == 9.5
    assert wait(connect_s=5.0, attempts=3, now_s=100.0, run_deadline_s=100.1, reserve_s=0.5) == 0.0


def test_a_pending_call_that_gives_up_is_transient_and_says_it_was_not_sent() -> None:
    error = tool_hosts.pending_tool_error("pool.whoami", 2.5)
    assert error.code is ToolErrorCode.TRANSIENT
    assert (
        error.message == "pool.whoami is not served yet: its tool host has not answered within 2.5s; not sent"
    )
