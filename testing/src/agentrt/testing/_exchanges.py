"""Recorded model exchanges, loaded from JSON fixtures (format in :mod:`agentrt.testing`)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentrt.testing._model_server import FakeResponse, RecordedRequest

__all__ = ["Exchange", "ExpectedRequest"]


@dataclass(frozen=True, kw_only=True)
class ExpectedRequest:
    """What a recorded exchange expects the provider to send.

    Attributes:
        method: HTTP method.
        path: Request target.
        headers: Headers that must be present with these values (names in any case).
        json: The whole JSON body, or ``None`` not to check it.
    """

    method: str = "POST"
    path: str
    headers: Mapping[str, str] = field(default_factory=dict)
    json: Any = None


@dataclass(frozen=True, kw_only=True)
class Exchange:
    """A recorded exchange: the request a provider should send and the answer it gets.

    Attributes:
        name: File stem of the fixture.
        description: What the exchange shows.
        request: The expected request.
        response: The answer to serve (a fresh :class:`FakeResponse` per :meth:`load`).
    """

    name: str
    description: str
    request: ExpectedRequest
    response: FakeResponse

    @classmethod
    def load(cls, path: str | Path) -> Exchange:
        """Load an exchange from a JSON fixture file (format in the module docstring).

        Raises:
            ValueError: The file does not have the fixture shape.
        """
        path = Path(path)
        raw = json.loads(path.read_text(encoding="utf-8"))
        try:
            wanted, answer = raw["request"], raw["response"]
            if "body_json" in answer:
                body = json.dumps(answer["body_json"]).encode()
            elif isinstance(answer.get("body", ""), list):
                body = "".join(answer["body"]).encode()
            else:
                body = str(answer.get("body", "")).encode()
            response = FakeResponse(
                status=int(answer.get("status", 200)),
                headers=tuple((str(k), str(v)) for k, v in answer.get("headers", {}).items()),
                body=body,
                chunks=tuple(int(offset) for offset in answer.get("chunks", ())),
                chunked=answer.get("chunked"),
                drop_at=answer.get("drop_at"),
                drop=answer.get("drop", "close"),
            )
            request = ExpectedRequest(
                method=wanted.get("method", "POST"),
                path=wanted["path"],
                headers=dict(wanted.get("headers", {})),
                json=wanted.get("json"),
            )
        except (KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"{path} is not a model exchange fixture: {exc!r}") from None
        if any(not 0 < offset < len(body) for offset in response.chunks):
            raise ValueError(f"{path}: chunk offsets must fall inside the body ({len(body)} bytes)")
        return cls(
            name=path.stem, description=str(raw.get("description", "")), request=request, response=response
        )

    def mismatches(self, received: RecordedRequest) -> list[str]:
        """Say how ``received`` differs from the expected request; empty when it matches."""
        wanted = self.request
        problems: list[str] = []
        if received.method != wanted.method or received.path != wanted.path:
            problems.append(
                f"request line {received.method} {received.path}, expected {wanted.method} {wanted.path}"
            )
        for name, value in wanted.headers.items():
            got = received.headers.get(name.lower())
            if got != value:
                problems.append(f"header {name}: {got!r}, expected {value!r}")
        if wanted.json is not None:
            body = received.json()
            if body != wanted.json:
                problems.extend(_json_differences(body, wanted.json, "body"))
        return problems


def _json_differences(got: Any, wanted: Any, where: str) -> list[str]:
    if isinstance(got, dict) and isinstance(wanted, dict):
        differences = []
        for key in sorted(set(got) | set(wanted)):
            if key not in wanted:
                differences.append(f"{where}.{key} is unexpected")
            elif key not in got:
                differences.append(f"{where}.{key} is missing")
            else:
                differences.extend(_json_differences(got[key], wanted[key], f"{where}.{key}"))
        return differences
    if isinstance(got, list) and isinstance(wanted, list) and len(got) == len(wanted):
        return [
            d
            for i, (g, w) in enumerate(zip(got, wanted, strict=True))
            for d in _json_differences(g, w, f"{where}[{i}]")
        ]
    return [] if got == wanted else [f"{where} is {got!r}, expected {wanted!r}"]
