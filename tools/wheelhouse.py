"""Download the site's dependencies, other than PyTorch itself, as wheels.

    python -m tools.wheelhouse --dest wheelhouse --python-version 3.12 --platform manylinux_2_28_x86_64

An air-gapped GPU runner already has torch, torchvision and triton; with this folder copied
across, ``make html PYTHON=python3 WHEELHOUSE=wheelhouse`` installs the rest offline.
"""

import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Provided by the GPU runner's own PyTorch installation.
SKIP = {"torch", "torchvision", "triton"}
_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


def requirements_without_torch(path=ROOT / "requirements.txt"):
    """The requirement lines of ``path`` and of the files it includes (``-r``), less SKIP."""
    kept = []
    for line in Path(path).read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line.startswith("-r "):
            kept += requirements_without_torch(Path(path).parent / line[3:].strip())
        match = _NAME.match(line)
        if match and match.group(1).lower() not in SKIP:
            kept.append(line)
    return kept


def platform_tags(platform):
    """The given manylinux tag and the older ones a runner with that glibc also accepts."""
    match = re.fullmatch(r"manylinux_2_(\d+)_(\w+)", platform)
    if not match:
        return [platform]
    newest, arch = int(match.group(1)), match.group(2)
    tags = [f"manylinux_2_{minor}_{arch}" for minor in range(newest, 4, -1)]
    return tags + [f"manylinux2014_{arch}", f"manylinux1_{arch}"]


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m tools.wheelhouse", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--dest", default="wheelhouse")
    parser.add_argument("--python-version", default="3.12")
    parser.add_argument("--platform", default="manylinux_2_28_x86_64")
    args = parser.parse_args(argv)
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as reqs:
        reqs.write("\n".join(requirements_without_torch()) + "\n")
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--only-binary=:all:",
        "--implementation",
        "cp",
        "--python-version",
        args.python_version,
        "-d",
        args.dest,
        "-r",
        reqs.name,
        # The docs tooling's pinned versions, as `make html` installs them.
        "-c",
        str(ROOT / "constraints-docs.txt"),
    ]
    for tag in platform_tags(args.platform):
        cmd += ["--platform", tag]
    print(" ".join(cmd[2:]))
    return subprocess.call(cmd)


if __name__ == "__main__":
    sys.exit(main())
