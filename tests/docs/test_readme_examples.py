"""The README's examples are the tested files of the docs, word for word (issue 20)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _block_under(heading: str, language: str) -> str:
    readme = (ROOT / "README.md").read_text()
    start = readme.index(f"\n{heading}\n")
    section = readme[start : readme.find("\n## ", start + 1)]
    found = re.search(rf"^```{language}\n(.*?)^```$", section, re.MULTILINE | re.DOTALL)
    assert found, f"README: no ```{language} block under {heading!r}"
    return found[1]


def test_the_readme_mcp_config_is_the_guide_s_tested_file() -> None:
    tested = (ROOT / "docs" / "examples" / "mcp" / "host.toml").read_text()
    assert _block_under("## Serving MCP servers", "toml") == tested
