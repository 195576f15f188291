"""Time ``bayeslat validate`` with its folds refitted one at a time and two at a time.

Runs ``bayeslat validate DATA --split SPLITS --jobs J`` as a user would (a fresh process) for
each ``J`` in ``--jobs``, prints each run's wall time, and checks that every figure of the
JSON it writes (the fits' seconds aside) is the same whatever ``J``: every fit is seeded, and
its sampler stops at the same checkpoint whatever the machine's load.

Target (issue 14, 2 cores): the example's default splits in <= 10 min.

    .venv/bin/python benchmarks/validate_times.py [--data PATH] [--split k,alpha]
                                                  [--jobs 2,1]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BIN = Path(sys.executable).parent / "bayeslat"


def figures(path: Path) -> dict:
    """The JSON's variants without the fits' seconds (which depend on the machine's load)."""
    doc = json.loads(path.read_text())
    for variant in doc["variants"]:
        for fold in variant["folds"]:
            fold.pop("seconds", None)
        if variant.get("loo"):
            variant["loo"].pop("seconds", None)
    return doc


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="data/example/sweep.parquet")
    parser.add_argument("--split", default="k,alpha")
    parser.add_argument("--jobs", default="2,1")
    args = parser.parse_args()
    docs = {}
    with tempfile.TemporaryDirectory() as tmp:
        for jobs in (int(j) for j in args.jobs.split(",")):
            out = Path(tmp) / f"jobs{jobs}.html"
            clock = time.perf_counter()
            done = subprocess.run([str(BIN), "validate", args.data, "--split", args.split,
                                   "--jobs", str(jobs), "-o", str(out)],
                                  capture_output=True, text=True)
            seconds = time.perf_counter() - clock
            if done.returncode:
                raise SystemExit(f"validate --jobs {jobs} failed:\n{done.stdout}{done.stderr}")
            docs[jobs] = figures(out.with_suffix(".json"))
            folds = len(docs[jobs]["variants"][0]["folds"])
            print(f"--jobs {jobs}: {seconds:.1f} s ({folds} folds and the whole sweep's fit)",
                  flush=True)
    first, *rest = docs.values()
    same = all(doc == first for doc in rest)
    print("figures the same whatever --jobs:", "yes" if same else "NO", flush=True)


if __name__ == "__main__":
    main()
