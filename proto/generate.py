"""Regenerate the committed protobuf package ``agentrt.proto`` from the ``.proto`` files in ``proto/``.

Run: ``python proto/generate.py`` (or ``--out DIR`` to write elsewhere; the drift test does that
and compares). Offline by design: pinned grpcio-tools for the messages, services and message stubs,
mypy-protobuf for the gRPC stubs, protoc-gen-connectrpc for the Connect stubs of the runtime API
(``*_connect.py``: the HTTP/JSON face, ``agentrt-proto[connect]``).

The wire packages stay ``agentrt.runtime.v1`` and ``agentrt.toolhost.v1``; only the Python modules
move under ``agentrt.proto`` (the distribution ``agentrt-proto``, ``proto/src``), so that the tool
SDK can be ``agentrt.toolhost``. protoc names modules after the ``.proto`` paths, so the generated
imports are rewritten afterwards, the way temporalio's scripts/gen_protos.py does. The ``.proto``
files are copied next to their modules so that they ship inside the wheel.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

import grpc_tools

ROOT = Path(__file__).resolve().parent.parent
PROTO_ROOT = ROOT / "proto"
#: The Python sources of the distribution ``agentrt-proto``.
SRC = PROTO_ROOT / "src"
#: The package, relative to ``--out``.
PACKAGE = Path("agentrt") / "proto"
INIT_TEXT = '"""Generated protobuf code for agentrt; never edit by hand (see proto/generate.py)."""\n'

# Module references only: "from agentrt.runtime.v1 import x_pb2", "agentrt.runtime.v1.x_pb2".
# Wire names ("agentrt.runtime.v1.AgentRuntimeService", the serialized descriptors) never match.
_IMPORT = re.compile(r"^(from|import) agentrt\.(runtime|toolhost)\.v1\b", re.M)
_MODULE = re.compile(r"\bagentrt\.(runtime|toolhost)\.v1\.(\w+_pb2(?:_grpc)?)\b")


def _rewrite(text: str) -> str:
    text = _IMPORT.sub(r"\1 agentrt.proto.\2.v1", text)
    return _MODULE.sub(r"agentrt.proto.\1.v1.\2", text)


def _protos() -> list[Path]:
    return sorted(p.relative_to(PROTO_ROOT) for p in (PROTO_ROOT / "agentrt").rglob("*.proto"))


#: The services also served over Connect (HTTP/JSON); the tool host contract stays gRPC only.
CONNECT_PROTOS = [Path("agentrt/runtime/v1/runtime_service.proto")]


def generate(out: Path) -> None:
    """Write the generated package under ``out / PACKAGE``, replacing what was there."""
    target = out / PACKAGE
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    protos = _protos()
    include = Path(grpc_tools.__file__).parent / "_proto"
    scripts = Path(sysconfig.get_path("scripts"))
    mypy_grpc = scripts / "protoc-gen-mypy_grpc"
    # protoc-gen-connectrpc matches the connectrpc runtime (0.13): its stubs take codecs, and
    # protobuf=google makes them use google.protobuf messages (the _pb2 modules above).
    connect = scripts / "protoc-gen-connectrpc"
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp)
        cmd = [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            f"-I{PROTO_ROOT}",
            f"-I{include}",
            f"--python_out={raw}",
            f"--pyi_out={raw}",
            f"--grpc_python_out={raw}",
            f"--plugin=protoc-gen-mypy_grpc={mypy_grpc}",
            f"--mypy_grpc_out=quiet:{raw}",
            *map(str, protos),
        ]
        subprocess.run(cmd, check=True, cwd=PROTO_ROOT)
        connect_cmd = [
            *cmd[:5],
            f"--plugin=protoc-gen-connectrpc={connect}",
            f"--connectrpc_out=protobuf=google:{raw}",
            *map(str, CONNECT_PROTOS),
        ]
        subprocess.run(connect_cmd, check=True, cwd=PROTO_ROOT)
        for path in sorted((raw / "agentrt").rglob("*")):
            if path.is_file():
                dest = target / path.relative_to(raw / "agentrt")
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.write_text(_rewrite(path.read_text()))
    for proto in protos:
        shutil.copyfile(PROTO_ROOT / proto, target / proto.relative_to("agentrt"))
    for directory in [target, *sorted(p for p in target.rglob("*") if p.is_dir())]:
        (directory / "__init__.py").write_text(INIT_TEXT)
    (target / "py.typed").write_text("")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=SRC, help="directory that receives agentrt/proto")
    generate(parser.parse_args().out)


if __name__ == "__main__":
    main()
