"""The connect layer of model calls (``[timeouts] connect_s``) and the typed facts of a failed call.

The shared HTTP driver connects within ``min(connect_s, the call's timeout)``. A call that made no
connection raises ModelTransientError with ``connect_failed`` (the request provably never left);
one whose own timeout fired has ``timed_out``. Both are set from httpx's exception types, and both
dialects share them. Real sockets on loopback: an endpoint whose accept queue is full (it takes no
connection), one that takes TCP but never completes TLS (a blackhole), a port nobody listens on,
and the fake model server holding its answer (too slow).
"""

from __future__ import annotations

import contextlib
import pickle
import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest

from agentrt.server.models import (
    AnthropicProvider,
    Message,
    ModelProvider,
    ModelRegistry,
    ModelRequest,
    ModelSpecData,
    ModelTransientError,
    OpenAIProvider,
    get_model_plugin_manager,
)
from agentrt.testing import FakeModelServer, FakeResponse

KEY_ENV = {"MODEL_TEST_KEY": "sk-connect-test-0123456789"}
CONNECT_S = 0.5
CALL_TIMEOUT_S = 20.0
PROVIDERS = {"openai": OpenAIProvider, "anthropic": AnthropicProvider}


def _options(base_url: str, provider: str) -> dict[str, Any]:
    # OpenAI's base URL carries the version path; Anthropic's is the API root.
    return {"base_url": base_url + ("/v1" if provider == "openai" else ""), "api_key_env": "MODEL_TEST_KEY"}


def _request(provider: str, timeout_s: float = CALL_TIMEOUT_S) -> ModelRequest:
    return ModelRequest(
        run_id="run-connect",
        step=1,
        spec=ModelSpecData(provider=provider, name="m", options={}),
        messages=(Message(role="system", content="Be brief."), Message(role="user", content="hi")),
        tools=(),
        timeout_s=timeout_s,
    )


async def _fail(provider: ModelProvider, request: ModelRequest) -> tuple[ModelTransientError, float]:
    began = time.monotonic()
    try:
        with pytest.raises(ModelTransientError) as caught:
            await provider.complete(request)
    finally:
        await provider.aclose()
    return caught.value, time.monotonic() - began


@contextlib.contextmanager
def _full_backlog() -> Iterator[str]:
    """A listening port whose accept queue is full: a new connect gets no answer (SYNs dropped)."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)  # room for one queued connection, never accepted
        port = listener.getsockname()[1]
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            yield f"http://127.0.0.1:{port}"


@contextlib.contextmanager
def _tls_blackhole() -> Iterator[str]:
    """TCP connects (the kernel queues it) but nobody reads: a TLS handshake never completes."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        yield f"https://127.0.0.1:{listener.getsockname()[1]}"


@pytest.fixture
def full_backlog() -> Iterator[str]:
    with _full_backlog() as url:
        yield url


@pytest.fixture(params=["full_backlog", "tls_blackhole"])
def no_connection(request: pytest.FixtureRequest) -> Iterator[str]:
    with _full_backlog() if request.param == "full_backlog" else _tls_blackhole() as url:
        yield url


@pytest.fixture
def nobody_listens() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{probe.getsockname()[1]}"  # closed again: nothing listens there


@pytest.mark.parametrize("provider", sorted(PROVIDERS))
async def test_an_endpoint_that_takes_no_connection_fails_within_connect_s_as_unsent(
    provider: str, no_connection: str
) -> None:
    model = PROVIDERS[provider](
        options=_options(no_connection, provider), environ=KEY_ENV, connect_s=CONNECT_S
    )

    error, took = await _fail(model, _request(provider))

    print(
        f"{provider} {no_connection}: failed after {took:.2f}s (connect_s {CONNECT_S}, call {CALL_TIMEOUT_S})"
    )
    assert (error.connect_failed, error.timed_out) == (True, False)  # the connect layer, not the call's
    assert error.reason == "connection" and error.retryable
    assert error.message.endswith(f"no connection within {CONNECT_S:g}s; not sent")
    assert KEY_ENV["MODEL_TEST_KEY"] not in repr(error)


@pytest.mark.parametrize("provider", sorted(PROVIDERS))
async def test_a_refused_connection_is_unsent_and_not_a_timeout(provider: str, nobody_listens: str) -> None:
    model = PROVIDERS[provider](
        options=_options(nobody_listens, provider), environ=KEY_ENV, connect_s=CONNECT_S
    )

    error, _ = await _fail(model, _request(provider))

    assert (error.connect_failed, error.timed_out, error.reason) == (True, False, "connection")
    assert error.message.endswith("; not sent") and "ConnectError" in error.message


@pytest.mark.parametrize("provider", sorted(PROVIDERS))
async def test_an_endpoint_that_answers_too_slowly_timed_out_after_the_request_may_have_left(
    provider: str,
) -> None:
    with FakeModelServer() as server:
        server.enqueue(FakeResponse(hang=True))
        model = PROVIDERS[provider](
            options=_options(server.url, provider), environ=KEY_ENV, connect_s=CONNECT_S
        )

        error, _ = await _fail(model, _request(provider, timeout_s=0.5))

        assert len(server.requests) == 1  # it got the request: nothing says it was not sent
    assert (error.timed_out, error.connect_failed, error.reason) == (True, False, "timeout")
    assert error.message == "model call timed out after 0.5s"


async def test_a_call_timeout_shorter_than_connect_s_bounds_the_connect(full_backlog: str) -> None:
    model = OpenAIProvider(options=_options(full_backlog, "openai"), environ=KEY_ENV, connect_s=30.0)

    error, took = await _fail(model, _request("openai", timeout_s=0.4))

    print(f"call timeout 0.4s under connect_s 30s: failed after {took:.2f}s")
    assert error.timed_out and error.reason == "timeout"  # the call's own timeout fired


async def test_the_registry_hands_its_connect_s_to_the_providers_it_makes(
    full_backlog: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MODEL_TEST_KEY", KEY_ENV["MODEL_TEST_KEY"])
    registry = ModelRegistry(get_model_plugin_manager(entrypoints=False), connect_s=0.25)
    spec = ModelSpecData(provider="anthropic", name="m", options=_options(full_backlog, "anthropic"))
    try:
        with registry.lease(spec) as provider, pytest.raises(ModelTransientError) as caught:
            await provider.complete(_request("anthropic"))
    finally:
        await registry.aclose()
    assert caught.value.connect_failed and not caught.value.timed_out
    assert caught.value.message.endswith("no connection within 0.25s; not sent")


def test_the_typed_facts_survive_pickling_and_show_in_repr() -> None:
    error = ModelTransientError("gone", reason="connection", connect_failed=True)

    copy = pickle.loads(pickle.dumps(error))

    assert (type(copy), copy.connect_failed, copy.timed_out, copy.reason) == (
        ModelTransientError,
        True,
        False,
        "connection",
    )
    assert repr(copy) == "ModelTransientError('gone', reason='connection', connect_failed=True)"
