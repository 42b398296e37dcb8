"""Regenerate the committed protobuf package ``agentrt`` from ``proto/``.

Run: ``python proto/generate.py`` (or ``--out DIR`` to write elsewhere; the drift
test does that and compares). Offline by design: pinned grpcio-tools for the
messages, services and message stubs, mypy-protobuf for the gRPC stubs.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import grpc_tools

ROOT = Path(__file__).resolve().parent.parent
PROTO_ROOT = ROOT / "proto"
PACKAGE = "agentrt"
INIT_TEXT = '"""Generated protobuf code for agentrt; never edit by hand (see proto/generate.py)."""\n'


def generate(out: Path) -> None:
    """Write the generated package under ``out / PACKAGE``, replacing what was there."""
    target = out / PACKAGE
    if target.exists():
        shutil.rmtree(target)
    out.mkdir(parents=True, exist_ok=True)
    protos = sorted(str(p.relative_to(PROTO_ROOT)) for p in PROTO_ROOT.rglob("*.proto"))
    include = Path(grpc_tools.__file__).parent / "_proto"
    mypy_grpc = Path(sysconfig.get_path("scripts")) / "protoc-gen-mypy_grpc"
    cmd = [
        sys.executable,
        "-m",
        "grpc_tools.protoc",
        f"-I{PROTO_ROOT}",
        f"-I{include}",
        f"--python_out={out}",
        f"--pyi_out={out}",
        f"--grpc_python_out={out}",
        f"--plugin=protoc-gen-mypy_grpc={mypy_grpc}",
        f"--mypy_grpc_out=quiet:{out}",
        *protos,
    ]
    subprocess.run(cmd, check=True, cwd=PROTO_ROOT)
    for directory in [target, *sorted(p for p in target.rglob("*") if p.is_dir())]:
        (directory / "__init__.py").write_text(INIT_TEXT)
    (target / "py.typed").write_text("")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=ROOT, help="directory that receives the package")
    generate(parser.parse_args().out)


if __name__ == "__main__":
    main()
