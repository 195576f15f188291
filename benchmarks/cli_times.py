"""Time the verbs users wait on after a fit: ``bayeslat decide`` and ``bayeslat report``.

Runs each command as a user would (a fresh process, so imports count), on a fit of the shipped
example (``--model``, default ``models/sweep-capacity.nc``, which ``make example`` writes),
``--repeat`` times, and prints the wall time of each run and the fastest:

- ``decide`` for one setup (``--setup``, on its own load grid up to its measured ceiling);
- ``decide`` for every setup of the fit (one posterior prediction for all of them);
- ``report`` of the fit (written to a temporary folder).

Targets (issues 13 and 16, 2 cores): decide for one setup <= 3 s, report <= 20 s.

    .venv/bin/python benchmarks/cli_times.py [--model PATH] [--repeat N] [--setup TEXT]
                                             [--allow-unconverged]

(``--allow-unconverged`` passes the flag on, to time a fit that missed the convergence bar.)
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BIN = Path(sys.executable).parent / "bayeslat"


def timed(args: list[str]) -> float:
    """Wall seconds of ``bayeslat ARGS`` in a fresh process; fails loudly if it fails."""
    clock = time.perf_counter()
    done = subprocess.run([str(BIN), *args], capture_output=True, text=True)
    seconds = time.perf_counter() - clock
    if done.returncode:
        raise SystemExit(f"bayeslat {' '.join(args)} failed:\n{done.stdout}{done.stderr}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="models/sweep-capacity.nc")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--setup", default="llama-8b H100 p256 g128")
    parser.add_argument("--allow-unconverged", action="store_true")
    args = parser.parse_args()
    if not Path(args.model).exists():
        raise SystemExit(f"{args.model} does not exist: run `make example` (or bayeslat fit) "
                         "first")
    with tempfile.TemporaryDirectory() as tmp:
        runs = {
            "decide, one setup": ["decide", args.model, "--alpha", "0.75", "--setup",
                                  args.setup, "--format", "json"],
            "decide, every setup": ["decide", args.model, "--alpha", "0.75", "--format", "json"],
            "report": ["report", args.model, "-o", str(Path(tmp) / "r.html"), "--overwrite"],
        }
        for name, command in runs.items():
            command += ["--allow-unconverged"] if args.allow_unconverged else []
            seconds = [timed(command) for _ in range(args.repeat)]
            print(f"{name:>20}: " + ", ".join(f"{s:.1f} s" for s in seconds)
                  + f" (fastest {min(seconds):.1f} s)", flush=True)


if __name__ == "__main__":
    main()
