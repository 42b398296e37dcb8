"""Model providers: what the engine asks for the next decision of a run.

Providers are pluggy plugins (hook :func:`~agentrt.server.models.hookspecs.agentrt_model_provider`);
the built-in ones are ``scripted`` (deterministic, for demos, tests and benchmarks), ``openai``
(Chat Completions over httpx) and ``anthropic`` (the Messages API over httpx); the HTTP ones stream
text deltas as they arrive. The engine uses them through a :class:`ModelRegistry`::

    registry = ModelRegistry(get_model_plugin_manager(), max_providers=64)
    with registry.lease(spec) as provider:  # not closed under the call, even if evicted meanwhile
        response = await provider.complete(request, on_text_delta=publish_delta)
    ...
    await registry.aclose()

A ``ModelTransientError`` with ``reason="stream_interrupted"`` means a stream broke off after
``on_text_delta`` may have received fragments: retry the whole step and drop those fragments.
:mod:`agentrt.testing` (distribution agentrt-testing) has a local fake model server for tests.
"""

from __future__ import annotations

from ._anthropic import AnthropicProvider
from ._cache import CacheStats, ProviderLease
from ._errors import (
    ModelAuthError,
    ModelConfigError,
    ModelError,
    ModelPermanentError,
    ModelTransientError,
)
from ._openai import OpenAIProvider
from ._registry import (
    DEFAULT_MAX_PROVIDERS,
    DEFAULT_MODEL_PLUGINS,
    ENTRYPOINT_GROUP,
    ModelRegistry,
    get_model_plugin_manager,
)
from ._scripted import EXHAUSTED_TEXT, ScriptedProvider
from ._types import (
    Message,
    ModelProvider,
    ModelRequest,
    ModelResponse,
    ModelSpecData,
    ModelToolCall,
    ToolDef,
)
from .hookspecs import hookimpl, hookspec

__all__ = [
    "DEFAULT_MAX_PROVIDERS",
    "DEFAULT_MODEL_PLUGINS",
    "ENTRYPOINT_GROUP",
    "EXHAUSTED_TEXT",
    "AnthropicProvider",
    "CacheStats",
    "Message",
    "ModelAuthError",
    "ModelConfigError",
    "ModelError",
    "ModelPermanentError",
    "ModelProvider",
    "ModelRegistry",
    "ModelRequest",
    "ModelResponse",
    "ModelSpecData",
    "ModelToolCall",
    "ModelTransientError",
    "OpenAIProvider",
    "ProviderLease",
    "ScriptedProvider",
    "ToolDef",
    "get_model_plugin_manager",
    "hookimpl",
    "hookspec",
]
