"""The checked-in generated code must match what the .proto generates now."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_generated_protobuf_code_is_fresh(tmp_path):
    subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen_proto.py"), "--out", str(tmp_path)],
        check=True,
        capture_output=True,
    )
    stale = [
        p.name
        for p in sorted(tmp_path.iterdir())
        if p.read_text() != (ROOT / "src" / "iris" / "rpc" / p.name).read_text()
    ]
    assert not stale, f"regenerate with `make proto`: {stale} are stale"
