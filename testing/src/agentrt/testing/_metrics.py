"""Scrape a process's ``/metrics`` over real HTTP and read samples from the Prometheus text format.

Standard library only: agentrt-testing installs without the server or prometheus_client.
"""

from __future__ import annotations

import re
import urllib.error
import urllib.request
from collections import Counter
from dataclasses import dataclass

__all__ = ["MetricSamples", "scrape_metrics"]

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+\d+)?$")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


@dataclass(frozen=True)
class MetricSamples:
    """One scrape: its text and its samples as ``(name, labels, value)``."""

    text: str
    samples: tuple[tuple[str, dict[str, str], float], ...]

    @classmethod
    def parse(cls, text: str) -> MetricSamples:
        samples = []
        for line in text.splitlines():
            if not line or line.startswith("#"):
                continue
            match = _SAMPLE.match(line)
            if match is None:
                raise ValueError(f"not a Prometheus sample line: {line!r}")
            name, labels, value = match.groups()
            samples.append((name, dict(_LABEL.findall(labels or "")), float(value)))
        return cls(text=text, samples=tuple(samples))

    def names(self) -> set[str]:
        """Every sample name, and every family name the ``# TYPE`` lines declare."""
        declared = {line.split()[2] for line in self.text.splitlines() if line.startswith("# TYPE ")}
        return declared | {name for name, _, _ in self.samples}

    def value(self, name: str, **labels: str) -> float:
        """The sum of ``name``'s samples whose labels include ``labels`` (0 when there are none)."""
        return sum(v for n, got, v in self.samples if n == name and labels.items() <= got.items())

    def counters(self, prefix: str = "agentrt_") -> Counter[str]:
        """Counter totals summed over their attributes, keyed without ``prefix`` and ``_total``.

        A counter never incremented has no sample yet: a ``Counter`` reads it as 0.
        """
        totals: Counter[str] = Counter()
        for name, _, value in self.samples:
            if name.startswith(prefix) and name.endswith("_total"):
                totals[name.removeprefix(prefix).removesuffix("_total")] += int(value)
        return totals


def scrape_metrics(address: str, *, token: str = "", timeout: float = 10.0) -> MetricSamples:
    """GET ``http://ADDRESS/metrics`` (with a bearer ``token`` when given) and parse it.

    Raises:
        urllib.error.URLError: the endpoint cannot be reached or answered with an error status.
    """
    request = urllib.request.Request(f"http://{address}/metrics")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return MetricSamples.parse(response.read().decode("utf-8"))
