"""Time the README's first command, ``make example``, from a fresh clone (issue 13).

    .venv/bin/python benchmarks/make_example.py [--cold]

Clones this repository's committed HEAD into a temporary folder and runs ``make example``
there as a newcomer would: a new virtual environment, bayeslat installed into it, the shipped
example fitted and its report written. Prints the wall time of each of the Makefile's steps
(timed from ``make``'s own echo of each command) and the total. ``--cold`` installs without
pip's cache and compiles with empty PyTensor and numba caches (a machine that has never
downloaded the packages or fitted a model). Target: the total ≤ 3 min
on 2 cores.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cold", action="store_true",
                        help="no pip, PyTensor or numba cache")
    args = parser.parse_args()
    env = dict(os.environ)
    env.pop("VIRTUAL_ENV", None)
    with tempfile.TemporaryDirectory() as tmp:
        if args.cold:  # no downloads and no compiled models kept from earlier runs
            env |= {"PIP_NO_CACHE_DIR": "1", "PYTENSOR_FLAGS": f"base_compiledir={tmp}/pytensor",
                    "NUMBA_CACHE_DIR": f"{tmp}/numba"}
        clone = Path(tmp) / "bayeslat"
        subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
        start = last = time.perf_counter()
        step = None
        # make echoes each command before it runs it: the time between echoes is the step's
        make = subprocess.Popen(["make", "example"], cwd=clone, env=env, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        for line in make.stdout:
            command = line.strip()
            if command.startswith((".venv/bin/", "python3 -m venv")):
                now = time.perf_counter()
                if step:
                    print(f"{now - last:7.1f} s  {step}", flush=True)
                step, last = command, now
        if make.wait():
            raise SystemExit(f"make example failed (exit {make.returncode})")
        end = time.perf_counter()
        print(f"{end - last:7.1f} s  {step}")
        print(f"{end - start:7.1f} s  make example from a fresh clone"
              f" ({'cold' if args.cold else 'warm'} caches)")


if __name__ == "__main__":
    sys.exit(main())
