"""Check the contract against its lock, or move the lock to the current contract.

``proto/v1.lock.binpb`` is a buf image of the wire contract as main last accepted it. CI runs
``buf breaking`` against it (tests/unit/test_proto_contract.py), so a change that breaks wire or
JSON compatibility with the previous main fails there, on a fresh clone, offline. The lock must
also equal the current contract, so every change to ``proto/`` moves it in the same commit.

Run:
- ``python proto/lock.py --check``: exit 1 when the contract breaks the lock or differs from it.
- ``python proto/lock.py`` (``make proto-lock``): move the lock after a compatible change.
- ``python proto/lock.py --accept-break``: move it over a deliberate break, which CHANGELOG.md
  must list.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOCK = ROOT / "proto" / "v1.lock.binpb"
BUF = ["npx", "--yes", "@bufbuild/buf@1.75.0"]


def buf(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    """Run the pinned buf (npx serves it from its cache when offline)."""
    return subprocess.run([*BUF, *args], cwd=cwd, capture_output=True, text=True, timeout=300)


def build_image(out: Path, cwd: Path = ROOT) -> None:
    """The contract as a buf image, without comments (they are not part of the wire)."""
    built = buf("build", "--exclude-source-info", "-o", str(out), cwd=cwd)
    if built.returncode != 0:
        raise SystemExit(f"buf build failed:\n{built.stdout}{built.stderr}")


def breaking(cwd: Path = ROOT, against: Path = LOCK) -> subprocess.CompletedProcess[str]:
    """``buf breaking`` of the contract under ``cwd`` against the lock (rules: buf.yaml)."""
    return buf("breaking", "--against", str(against), cwd=cwd)


def current_equals_lock() -> bool:
    with tempfile.TemporaryDirectory() as tmp:
        fresh = Path(tmp) / "current.binpb"
        build_image(fresh)
        return LOCK.exists() and fresh.read_bytes() == LOCK.read_bytes()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--check", action="store_true", help="only check; change nothing")
    parser.add_argument("--accept-break", action="store_true", help="move the lock over a deliberate break")
    args = parser.parse_args()
    result = breaking() if LOCK.exists() else None
    broken = result is not None and result.returncode != 0
    if broken and result is not None:
        print(result.stdout + result.stderr, file=sys.stderr, end="")
    if args.check:
        if broken:
            raise SystemExit("the contract breaks proto/v1.lock.binpb (see above)")
        if not current_equals_lock():
            raise SystemExit("proto/ changed compatibly but the lock did not move: run `make proto-lock`")
        return
    if broken and not args.accept_break:
        raise SystemExit(
            "refusing to move the lock over a break; a deliberate one needs --accept-break and CHANGELOG.md"
        )
    build_image(LOCK)
    print(f"wrote {LOCK.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
