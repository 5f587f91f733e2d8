"""Regenerates the checked-in protobuf and Connect code under src/iris/rpc from controller.proto.

Usage: python scripts/gen_proto.py [--out DIR]   (default: src/iris/rpc)
tests/test_proto_fresh.py runs it into a temporary folder and fails when the checked-in files differ.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RPC = ROOT / "src" / "iris" / "rpc"
PROTOS = ["controller.proto"]
GENERATED = ["controller_pb2.py", "controller_pb2.pyi", "controller_connect.py"]


def generate(out: Path) -> list[Path]:
    bin_dir = Path(sys.executable).parent
    plugin = bin_dir / "protoc-gen-connectrpc"
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            f"-I{RPC}",
            f"--plugin=protoc-gen-connectrpc={plugin}",
            f"--python_out={tmp}",
            f"--pyi_out={tmp}",
            f"--connectrpc_out={tmp}",
            "--connectrpc_opt=protobuf=google",
            *PROTOS,
        ]
        subprocess.run(cmd, check=True, cwd=RPC)
        out.mkdir(parents=True, exist_ok=True)
        written = []
        for name in GENERATED:
            shutil.copyfile(Path(tmp) / name, out / name)
            written.append(out / name)
        return written


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=RPC)
    args = parser.parse_args()
    for path in generate(args.out):
        print(f"wrote {path}")
