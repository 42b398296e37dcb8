"""The ``@tool`` decorator and the :class:`Tool` value it produces."""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import inspect
import json
import math
import re
import typing
from collections.abc import Callable, Mapping
from typing import Any

import pydantic
import pydantic_core

from agentrt.toolhost._context import ToolContext
from agentrt.toolhost._errors import InvalidInput, PermanentError
from agentrt.toolhost._validate import JsonBoundsError, loads_bounded

__all__ = [
    "CLEANUP",
    "SET_VARIABLES",
    "Intent",
    "IntentScope",
    "SideEffect",
    "Tool",
    "ToolFunction",
    "canonical_json",
    "tool",
    "with_cleanup",
    "with_variables",
]

SET_VARIABLES = "_set_variables"
"""The reserved member of a result object through which a tool sets run variables."""

CLEANUP = "_cleanup"
"""The reserved member of a result object through which a tool registers cleanups."""

ToolFunction = Callable[[Any, ToolContext], Any]
"""``def f(args: Model, ctx: ToolContext) -> JSON-able`` or the ``async def`` equivalent."""

_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*(\.[A-Za-z_][A-Za-z0-9_-]*)*$")


class SideEffect(enum.Enum):
    """What a tool does to the world; decides how the runtime retries and recovers it."""

    READ_ONLY = "READ_ONLY"
    WRITE = "WRITE"
    DESTRUCTIVE = "DESTRUCTIVE"


class IntentScope(enum.Enum):
    """Where a tool's business intent must be unique (mirrors ``agentrt.toolhost.v1.IntentScope``)."""

    RUN = "RUN"
    SESSION = "SESSION"  # a run without a session is its own scope
    TENANT = "TENANT"


@dataclasses.dataclass(frozen=True, kw_only=True)
class Intent:
    """A tool's business intent key (S004 §10.2): what a call does in the world, beyond its key.

    Two calls of the tool whose ``arguments`` have the same values, within ``scope`` (and
    ``window`` seconds of the first), are the same intent: the host runs the first and answers
    the second with the first's recorded result, marked deduplicated. Only a call a person
    approved with ``override_intent`` runs again.

    Example: ``Intent(arguments=("order_id",), scope=IntentScope.SESSION)`` for refunds.

    Attributes:
        arguments: Names of top-level arguments whose values make the intent (at least one).
        scope: Run, session or tenant.
        window: Seconds a repeat counts as a duplicate after the first call; None: forever
            (in practice, as long as the ledger keeps the first call's entry).
    """

    arguments: tuple[str, ...]
    scope: IntentScope = IntentScope.RUN
    window: float | None = None

    def __post_init__(self) -> None:
        if isinstance(self.arguments, str):
            raise ValueError("intent arguments must be a sequence of argument names, not a string")
        if not self.arguments or len(set(self.arguments)) != len(self.arguments):
            raise ValueError("an intent names one or more distinct arguments")
        if self.window is not None and not (self.window > 0 and math.isfinite(self.window)):
            raise ValueError("an intent window must be a positive number of seconds (or None)")


def with_variables(
    result: Mapping[str, Any], variables: Mapping[str, str | float | bool | None]
) -> dict[str, Any]:
    """Return ``result`` with run variables to set, in its reserved ``_set_variables`` member.

    Run variables are business facts the run carries (an order id, that an identity was
    verified); later steps, approvals and re-checks read them. Values are strings, numbers or
    booleans; None removes a variable. Never put a secret there: variables are shown to approvers
    and in GetRun, and the runtime refuses names and values that look like credentials.

    The member is part of the result the ledger records, so a replayed or deduplicated answer
    sets the same variables again.
    """
    return {**result, SET_VARIABLES: dict(variables)}


def with_cleanup(
    result: Mapping[str, Any],
    *,
    tool: str | None = None,
    hook: str | None = None,
    arguments: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Return ``result`` registering a cleanup the runtime runs when the run ends (S002 §8).

    Name exactly one of ``tool`` (a tool of this same host, e.g. ``"sandbox.destroy"``, that needs
    no approval) or ``hook`` (a name the runtime's ``agentrt_cleanup`` plugin handles). When the
    run ends (completed, failed, cancelled or expired) the runtime calls it, newest registration
    first, before it commits the end; with retries under one idempotency key, so make it
    idempotent. Call it again on its own output to register more than one.

    Example: ``return with_cleanup({"sandbox_id": sid}, tool="sandbox.destroy",
    arguments={"sandbox_id": sid})``.
    """
    if (tool is None) == (hook is None):
        raise ValueError("a cleanup names exactly one of tool and hook")
    request: dict[str, Any] = {"tool": tool} if tool is not None else {"hook": hook}
    request["arguments"] = dict(arguments or {})
    earlier = result.get(CLEANUP)
    requests = [*(earlier if isinstance(earlier, list) else [earlier] if earlier else []), request]
    return {**result, CLEANUP: requests if len(requests) > 1 else request}


def canonical_json(value: Any) -> str:
    """Return the canonical JSON text of ``value``: sorted keys, no spaces, UTF-8 kept.

    Args:
        value: A JSON-able value (as produced by ``json.loads``).

    Returns:
        The text whose sha256 is a call's input hash.
    """
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Tool:
    """One tool a plugin serves: its contract (the ``ToolSpec`` fields) plus the callable.

    Build it with :func:`tool`; plugins return a list of these from ``agentrt_register_tools``.

    Attributes:
        name: Unique name within a host, e.g. ``"refund.issue"``.
        description: Human and model facing description.
        side_effect: What the tool does to the world.
        idempotent: True when invoking twice with the same arguments has the effect of invoking once.
        supports_query: True when GetOperation can answer for past invocations, even after the
            host died while one ran; None (the default) lets the host decide (see ``answers_queries``).
        concurrency_safe: True when calls may run concurrently with other calls of the same run.
        requires_approval: True when every call needs a person's approval first.
        timeout: Seconds a call may take when the caller's deadline allows more.
        version: Contract version; bump it when the input schema changes.
        max_concurrent_calls: Calls a runtime process sends at once (0: no limit); more wait.
        intent: The business intent key, or None (calls are deduplicated by idempotency key only).
        fn: The function, sync (runs in a worker thread) or async (runs on the host's loop).
        args_model: The pydantic model of the arguments; its JSON schema is the input schema.
    """

    name: str
    description: str
    side_effect: SideEffect
    idempotent: bool = False
    supports_query: bool | None = None
    concurrency_safe: bool = False
    requires_approval: bool = False
    timeout: float = 30.0
    version: str = "1"
    max_concurrent_calls: int = 0
    intent: Intent | None = None
    fn: ToolFunction = dataclasses.field(repr=False, compare=False)
    args_model: type[pydantic.BaseModel] = dataclasses.field(compare=False)

    def __post_init__(self) -> None:
        if not _NAME_RE.match(self.name):
            raise ValueError(f"invalid tool name {self.name!r}: use dotted identifiers like 'refund.issue'")
        if not (self.timeout > 0 and math.isfinite(self.timeout)):
            raise ValueError(f"tool {self.name!r}: timeout must be a positive number of seconds")
        if not self.version:
            raise ValueError(f"tool {self.name!r}: version must not be empty")
        if not 0 <= self.max_concurrent_calls < 2**32:
            raise ValueError(f"tool {self.name!r}: max_concurrent_calls must be 0 (no limit) or more")
        if self.intent is not None:
            fields = self.args_model.model_fields
            unknown = [name for name in self.intent.arguments if name not in fields]
            if unknown:
                raise ValueError(f"tool {self.name!r}: the intent names unknown arguments {unknown}")

    @property
    def is_async(self) -> bool:
        """True when the function is a coroutine function (runs on the loop, not in a thread)."""
        return inspect.iscoroutinefunction(self.fn)

    @property
    def rerun_after_crash(self) -> bool:
        """True when a call left RUNNING by a crashed host may simply run again."""
        return self.idempotent or self.side_effect is SideEffect.READ_ONLY

    def input_schema(self) -> dict[str, Any]:
        """Return the JSON Schema (draft 2020-12) of the arguments object."""
        return self.args_model.model_json_schema()

    def parse_arguments(self, arguments_json: str) -> tuple[pydantic.BaseModel, Any]:
        """Parse and validate arguments JSON text.

        An empty text means ``{}``, for tools without arguments.

        Args:
            arguments_json: The arguments object as JSON text.

        Returns:
            The validated model and the parsed JSON value (for hashing).

        Raises:
            InvalidInput: The text is not JSON or violates the schema; ``details["errors"]``
                lists the problems as ``{"type", "loc", "msg"}`` objects.
        """
        text = arguments_json if arguments_json.strip() else "{}"
        try:
            # Bounded in size and depth: deep nesting must be a typed error, not a RecursionError.
            raw = loads_bounded(text)
        except JsonBoundsError as exc:
            error = {"type": "json_invalid", "loc": [], "msg": f"arguments: {exc}"}
            raise InvalidInput(f"arguments: {exc}", details={"errors": [error]}) from None
        try:
            model = self.args_model.model_validate_json(text)
        except pydantic.ValidationError as exc:
            errors = [
                {"type": e["type"], "loc": list(e["loc"]), "msg": e["msg"]}
                for e in exc.errors(include_url=False, include_context=False, include_input=False)
            ]
            raise InvalidInput(
                f"arguments do not match the input schema of {self.name!r} ({len(errors)} error(s))",
                details={"errors": errors},
            ) from None
        return model, raw

    async def invoke(self, args: pydantic.BaseModel, ctx: ToolContext) -> Any:
        """Call the tool: async functions on the running loop, sync ones in a worker thread.

        Args:
            args: Validated arguments (an instance of :attr:`args_model`).
            ctx: The call's context.

        Returns:
            Whatever the function returned.
        """
        if self.is_async:
            return await self.fn(args, ctx)
        result = await asyncio.to_thread(self.fn, args, ctx)
        if inspect.isawaitable(result):
            return await result
        return result

    @staticmethod
    def serialise_result(result: Any) -> str:
        """Return a tool result as JSON text (pydantic models, dicts, lists, str, numbers, None).

        Raises:
            PermanentError: The result cannot be serialised to JSON.
        """
        try:
            return pydantic_core.to_json(result).decode()
        except (pydantic_core.PydanticSerializationError, ValueError, TypeError) as exc:
            raise PermanentError(
                f"tool result is not JSON serialisable: {type(exc).__name__}: {exc}"
            ) from None


def _args_model_of(fn: ToolFunction) -> type[pydantic.BaseModel]:
    params = [
        p
        for p in inspect.signature(fn).parameters.values()
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]
    if len(params) != 2:
        raise TypeError(
            f"tool function {fn.__qualname__} must take (args, ctx), got {len(params)} parameter(s)"
        )
    try:
        annotation: Any = typing.get_type_hints(fn).get(params[0].name)
    except NameError as exc:
        raise TypeError(
            f"cannot resolve the argument annotation of {fn.__qualname__} ({exc}); "
            "define the model at module level or pass args_model="
        ) from None
    if not (isinstance(annotation, type) and issubclass(annotation, pydantic.BaseModel)):
        raise TypeError(
            f"the first parameter of {fn.__qualname__} must be annotated with a pydantic model, "
            f"got {annotation!r}"
        )
    return annotation


def tool(
    *,
    name: str,
    description: str,
    side_effect: SideEffect,
    idempotent: bool = False,
    supports_query: bool | None = None,
    concurrency_safe: bool = False,
    requires_approval: bool = False,
    timeout: float = 30.0,
    version: str = "1",
    max_concurrent_calls: int = 0,
    intent: Intent | None = None,
    args_model: type[pydantic.BaseModel] | None = None,
) -> Callable[[ToolFunction], Tool]:
    """Declare a tool; the decorated function becomes a :class:`Tool`.

    Example::

        class LookupArgs(pydantic.BaseModel):
            order_id: str

        @tool(name="orders.lookup", description="Look up an order.", side_effect=SideEffect.READ_ONLY)
        def lookup(args: LookupArgs, ctx: ToolContext) -> dict[str, str]:
            ...

    Args:
        name: Unique tool name, dotted identifiers such as ``"refund.issue"``.
        description: Human and model facing description.
        side_effect: READ_ONLY, WRITE or DESTRUCTIVE.
        idempotent: Invoking twice with the same arguments has the effect of invoking once.
        supports_query: GetOperation can answer for this tool's past invocations even after the host
            died while one ran: a plugin implements ``agentrt_query_operation`` for it. Leave it
            None and the host decides: true for read-only and idempotent tools, and when the tool's
            own plugin implements the query hook. Declared true with no hook anywhere, the host
            reports false (and warns).
        concurrency_safe: Calls may run concurrently with other calls of the same run.
        requires_approval: Every call needs a person's approval before it runs.
        timeout: Seconds a call may take; the caller's deadline still caps it.
        version: Contract version; bump it when the input schema changes.
        max_concurrent_calls: Calls a runtime process sends at once, across all runs (0: no limit);
            calls past it wait for a slot. Declare what the tool's backend can take.
        intent: The business intent key (:class:`Intent`): a repeat of the same intent in its
            scope is answered with the first call's result instead of running again.
        args_model: The arguments model, when it cannot be read from the annotation.

    Returns:
        A decorator turning ``f(args, ctx)`` (sync or async) into a :class:`Tool`.

    Raises:
        TypeError: The function's signature or annotation does not fit.
        ValueError: A bad name, timeout, version or max_concurrent_calls, or an intent naming
            arguments the model does not have.
    """

    def decorate(fn: ToolFunction) -> Tool:
        return Tool(
            name=name,
            description=description,
            side_effect=side_effect,
            idempotent=idempotent,
            supports_query=supports_query,
            concurrency_safe=concurrency_safe,
            requires_approval=requires_approval,
            timeout=float(timeout),
            version=version,
            max_concurrent_calls=max_concurrent_calls,
            intent=intent,
            fn=fn,
            args_model=args_model if args_model is not None else _args_model_of(fn),
        )

    return decorate
