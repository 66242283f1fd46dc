"""Time the three builds that matter to a site maintainer, one after the other.

    python -m tools.timed_builds --out /some/folder [make arguments ...]

1. cold: no generated pages and an empty compile cache (`.cache/`): everything executes
   and compiles;
2. no-change: nothing removed: sphinx-gallery's checksums say nothing changed, so
   nothing executes;
3. warm: generated pages removed, compile cache kept: everything executes, kernels come
   from the cache.

Each build's output goes to ``OUT/build-<name>.log``; ``OUT/timings.json`` holds seconds,
exit status and sphinx-gallery's "executed N out of M" for each. Extra arguments are passed
to ``make html`` (e.g. ``PYTHON=python3 WHEELHOUSE=wheelhouse``).
"""

import argparse
import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_EXECUTED = re.compile(r"successfully executed (\d+) out of (\d+)")


def run_make(target_args, log):
    start = time.perf_counter()
    with open(log, "w") as out:
        proc = subprocess.run(
            ["make", *target_args], cwd=ROOT, stdout=out, stderr=subprocess.STDOUT
        )
    seconds = time.perf_counter() - start
    match = _EXECUTED.search(Path(log).read_text(errors="replace"))
    return {
        "seconds": round(seconds, 1),
        "returncode": proc.returncode,
        "executed": int(match.group(1)) if match else None,
        "examples": int(match.group(2)) if match else None,
    }


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m tools.timed_builds", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "--out",
        required=True,
        help="a folder outside _build/ and .cache/ (both are wiped)",
    )
    args, make_args = parser.parse_known_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results = {}
    for name in ("cold", "no-change", "warm"):
        if name in ("cold", "warm"):
            subprocess.run(["make", "clean"], cwd=ROOT, check=True, capture_output=True)
        if name == "cold":
            shutil.rmtree(ROOT / ".cache", ignore_errors=True)
        results[name] = run_make(["html", *make_args], out / f"build-{name}.log")
        print(f"{name:>9}: {results[name]}", flush=True)
        (out / "timings.json").write_text(json.dumps(results, indent=2) + "\n")
        if results[name]["returncode"] != 0:
            return results[name]["returncode"]
    return 0


if __name__ == "__main__":
    sys.exit(main())
