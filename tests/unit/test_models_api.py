"""Public surface of agentrt.server.models: exports, value types, error tree, documented hooks."""

from __future__ import annotations

import dataclasses
import inspect
import pickle
import types

import pytest

import agentrt.server.models as models
from agentrt.server.models import (
    Message,
    ModelAuthError,
    ModelConfigError,
    ModelError,
    ModelPermanentError,
    ModelProvider,
    ModelTransientError,
    ScriptedProvider,
    ToolDef,
    hookspecs,
)


def _ruff_order(name: str) -> tuple[int, str]:
    # ruff RUF022 ("isort-style"): CONSTANTS, then Classes, then functions.
    kind = 0 if name.isupper() else 1 if name[0].isupper() else 2
    return kind, name


def test_all_is_complete_and_sorted() -> None:
    public = {
        name
        for name, value in vars(models).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType) and name != "annotations"
    }

    assert models.__all__ == sorted(models.__all__, key=_ruff_order)
    assert set(models.__all__) == public


def test_values_are_frozen_and_keyword_only() -> None:
    message = Message(role="user", content="hi")

    with pytest.raises(dataclasses.FrozenInstanceError):
        message.content = "changed"  # type: ignore[misc]
    with pytest.raises(TypeError):
        ToolDef("t", "d", {})  # type: ignore[call-arg]
    assert (message.tool_calls, message.tool_call_id) == ((), "")


def test_builtin_providers_satisfy_the_protocol() -> None:
    assert isinstance(ScriptedProvider(options={"steps": []}), ModelProvider)


@pytest.mark.parametrize(
    ("error", "kind", "retryable"),
    [
        (ModelTransientError, "transient", True),
        (ModelPermanentError, "permanent", False),
        (ModelAuthError, "auth", False),
        (ModelConfigError, "config", False),
    ],
)
def test_error_tree(error: type[ModelError], kind: str, retryable: bool) -> None:
    exc = error("went wrong", retry_after_s=2.0, status_code=429)

    assert isinstance(exc, ModelError) and isinstance(exc, Exception)
    assert (exc.kind, exc.retryable, exc.reason, exc.message, str(exc)) == (
        kind,
        retryable,
        kind,
        "went wrong",
        "went wrong",
    )
    assert (exc.retry_after_s, exc.status_code) == (2.0, 429)
    assert error.__name__ in (inspect.getmodule(ModelError).__doc__ or "")  # drawn in the tree


def test_errors_keep_their_fields_through_pickle_and_repr() -> None:
    exc = ModelTransientError("slow down", reason="rate_limited", retry_after_s=7.0, status_code=429)

    copy = pickle.loads(pickle.dumps(exc))

    assert type(copy) is ModelTransientError
    assert (copy.message, copy.reason, copy.retry_after_s, copy.status_code) == (
        "slow down",
        "rate_limited",
        7.0,
        429,
    )
    assert (
        repr(exc)
        == "ModelTransientError('slow down', reason='rate_limited', retry_after_s=7.0, status_code=429)"
    )
    assert repr(ModelAuthError("no")) == "ModelAuthError('no', reason='auth')"


def hook_specs() -> list[types.FunctionType]:
    return [
        value
        for name, value in vars(hookspecs).items()
        if name.startswith("agentrt_") and isinstance(value, types.FunctionType)
    ]


def test_hooks_are_documented() -> None:
    specs = hook_specs()

    assert [spec.__name__ for spec in specs] == ["agentrt_model_provider", "agentrt_model_provider_names"]
    for spec in specs:
        doc = inspect.getdoc(spec) or ""
        assert ":return:" in doc, spec.__name__
        for parameter in inspect.signature(spec).parameters:
            assert f":param {parameter}:" in doc, (spec.__name__, parameter)
    assert "Stops at first non-None result" in (inspect.getdoc(hookspecs.agentrt_model_provider) or "")
