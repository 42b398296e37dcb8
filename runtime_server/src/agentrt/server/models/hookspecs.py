"""Hook specifications for model provider plugins.

A plugin is a module (or object) with functions marked by :data:`hookimpl`, registered through
the ``agentrt.models`` entry-point group. The built-in ``scripted``, ``openai`` and ``anthropic``
providers are plugins too. Example::

    from agentrt.server.models import hookimpl

    @hookimpl
    def agentrt_model_provider(name, options):
        if name != "echo":
            return None
        return EchoProvider(options=options)

    @hookimpl
    def agentrt_model_provider_names():
        return ["echo"]

Hooks are called with keyword arguments only; an implementation may accept a subset of them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    from ._types import ModelProvider

__all__ = ["PROJECT_NAME", "agentrt_model_provider", "agentrt_model_provider_names", "hookimpl", "hookspec"]

#: The pluggy project and entry-point group of models plugins (one per hook family).
PROJECT_NAME = "agentrt.models"

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
#: Marks a plugin's implementation of a hook; the same project name as the tool host's marker.
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)


@hookspec(firstresult=True)
def agentrt_model_provider(name: str, options: Mapping[str, Any], connect_s: float) -> ModelProvider | None:
    """Create the model provider called ``name``, or return ``None`` when it is not yours.

    Stops at first non-None result. Called once per distinct (provider, model, options) of a
    model spec; the runtime caches the provider and shares it between runs and steps, so it
    must be safe for concurrent ``complete`` calls. The model name comes with every request
    (``ModelRequest.spec.name``).

    Validate ``options`` here, once, and raise :class:`~agentrt.server.models.ModelConfigError`
    with a clear message when they are wrong. Options never contain secrets: read credentials
    from the environment (e.g. the variable an ``api_key_env`` option names).

    :param name: Provider name from the model spec, e.g. ``"scripted"`` or ``"openai"``.
    :param options: Provider options (JSON values, a private copy, read-only by contract).
    :param connect_s: Seconds a call may wait for a connection to the model's endpoint
        (``[timeouts] connect_s``; never longer than the call's own timeout). A provider that
        connects nowhere ignores it.
    :return: A :class:`~agentrt.server.models.ModelProvider`, or ``None``.
    """


@hookspec
def agentrt_model_provider_names() -> list[str]:
    """Return the provider names this plugin serves through :func:`agentrt_model_provider`.

    Used only to name the known providers in the error for an unknown one; optional.

    :return: Provider names, e.g. ``["scripted"]``.
    """
    raise NotImplementedError  # pluggy never calls a hookspec's body
