"""`python -m iris.controller CONFIG.yaml`: run a controller in the foreground (what
`iris cluster start --config` does, without the CLI)."""

import sys

from iris.controller.process import run_foreground
from iris.core.config import load_config
from iris.core.errors import IrisError

if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m iris.controller CONFIG.yaml")
    try:
        run_foreground(load_config(sys.argv[1]))
    except IrisError as exc:
        sys.exit(f"error: {exc.message}")
