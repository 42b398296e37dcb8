"""One secured runtime and one tool host per fuzz module (real processes, SQLite store)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.fuzz.harness import FuzzStack, fuzz_stack


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FuzzStack]:
    with fuzz_stack(tmp_path_factory.mktemp("fuzz")) as running:
        yield running
