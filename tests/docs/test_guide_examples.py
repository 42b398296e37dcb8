"""Every code example in the guides is a file that a test runs (issue 20): under docs/examples/,
or deploy/ (its config files are what the deploy and multi-replica tests run with).

So a guide's code block holds exactly one snippet line, ``--8<-- "FILE[:SECTION]"``, naming a
file that exists and, with a section, the markers around it. A block written inline, or a snippet
line mangled (a formatter once turned them into ``--8 < --"..."``, which mkdocs prints as text),
fails here.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
# mkdocs.yml's snippet base paths: examples tests run, and deploy/, which the deploy tests load.
SNIPPET_ROOTS = [DOCS / "examples", ROOT / "deploy"]
FENCE = re.compile(r"^```[a-z]*\n(.*?)^```$", re.MULTILINE | re.DOTALL)
SNIPPET = re.compile(r'--8<-- "(?P<file>[^":]+)(?::(?P<section>[\w-]+))?"')


def guides() -> list[Path]:
    return sorted((DOCS / "guides").glob("*.md"))


def test_there_are_guides_to_check() -> None:
    assert len(guides()) >= 2


@pytest.mark.parametrize("guide", guides(), ids=lambda path: path.name)
def test_each_code_block_of_a_guide_is_a_snippet_of_a_tested_file(guide: Path) -> None:
    blocks = FENCE.findall(guide.read_text())
    assert blocks, f"{guide.name} has no code blocks"
    for block in blocks:
        found = SNIPPET.fullmatch(block.strip())
        assert found, f"{guide.name}: a code block that is not one snippet line: {block.strip()[:80]!r}"
        sources = [root / found["file"] for root in SNIPPET_ROOTS if (root / found["file"]).is_file()]
        assert sources, f"{guide.name}: {found['file']} is under neither docs/examples/ nor deploy/"
        source = sources[0]
        if found["section"]:
            text = source.read_text()
            for marker in (f"[start:{found['section']}]", f"[end:{found['section']}]"):
                assert f"--8<-- {marker}" in text, f"{found['file']} has no {marker}"
