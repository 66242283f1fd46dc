"""Put the shards of a sharded build back together into one site, then validate it.

    python -m tools.merge --save _build/shard        after `make html SHARD=i/N` (make does it)
    python -m tools.merge SHARD_DIR... --out _build/html    (make merge SHARDS="...")

A shard's output is what sphinx-gallery generated in its checkout (``recipes/``,
``intermediate/``: each tutorial's page source, images, downloads, checksum and run record),
saved by ``--save``. The merge takes every tutorial's generated files from the one shard that
executed it (the one holding a passing run record of the current source), lays them into
this checkout's gallery folders and builds the site once with nothing executed:
sphinx-gallery reuses each executed page as is, and Sphinx assembles everything that spans
pages (search index, gallery indexes, execution times, build report, llms-full.txt) as in a
single build. It fails, naming the tutorial, when a tutorial was executed by no shard or by
more than one, or by a shard built from other sources; then the validator must pass.
"""

import argparse
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from tools import gallery, validate
from tools.shard import NOTHING

MARKER = "shard-output.txt"  # not a dotfile: artifact uploads skip those


class MergeError(Exception):
    """The shards do not make one site; the message says which tutorial and why."""


def _generated_files(gallery, stem):
    """What sphinx-gallery writes for one example: <stem>.rst/.py/.py.md5/.ipynb/.zip/...,
    images/sphx_glr_<stem>_NNN.*, images/thumb/sphx_glr_<stem>_thumb.*, <stem>_report/**"""
    gallery = Path(gallery)
    own = re.compile(rf"^{re.escape(stem)}\.")
    image = re.compile(rf"^sphx_glr_{re.escape(stem)}_(\d+|thumb)\.\w+$")
    files = [p for p in gallery.glob(f"{stem}.*") if p.is_file() and own.match(p.name)]
    for folder in (gallery / "images", gallery / "images" / "thumb"):
        files += [
            p
            for p in folder.glob(f"sphx_glr_{stem}_*")
            if p.is_file() and image.match(p.name)
        ]
    # A folder the tutorial wrote beside itself, published by sphinxext/reports.py.
    files += [p for p in (gallery / f"{stem}_report").rglob("*") if p.is_file()]
    return sorted(files)


def save(root, dest):
    """Copy the gallery folders sphinx-gallery generated in ``root`` into ``dest``."""
    root, dest = Path(root), Path(dest)
    if dest.exists():
        if any(dest.iterdir()) and not (dest / MARKER).is_file():
            raise MergeError(
                f"{dest} exists and is not a shard output; give an empty or new folder"
            )
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    for folder in gallery.GALLERIES.values():
        if not (root / folder).is_dir():
            raise MergeError(
                f"{root / folder} does not exist: build the shard first (make html SHARD=i/N)"
            )
        shutil.copytree(root / folder, dest / folder)
    (dest / MARKER).write_text(
        "generated galleries of one shard, for python -m tools.merge\n"
    )
    return dest


def owners(root, shards):
    """{tutorial source: the shard folder that executed it}; MergeError unless exactly one did."""
    root = Path(root)
    problems = [
        f"{s}: not a shard output (written by python -m tools.merge --save)"
        for s in shards
        if not (s / MARKER).is_file()
    ]
    owner = {}
    for tutorial in gallery.tutorials(root):
        ran, other = [], []
        for shard in shards:
            path = tutorial.generated(shard).with_suffix(gallery.RECORD_SUFFIX)
            if path.is_file():
                record = gallery.read_record(path)
                (ran if gallery.ran(tutorial, [record], root) else other).append(
                    str(shard)
                )
        if other:
            problems.append(
                f"{tutorial.source}: {', '.join(other)} executed another version of it, or it failed there"
            )
        if len(ran) > 1:
            problems.append(
                f"{tutorial.source}: executed twice, by {' and '.join(ran)}"
            )
        elif not ran:
            problems.append(f"{tutorial.source}: no shard executed it")
        else:
            owner[tutorial] = Path(ran[0])
    if problems:
        raise MergeError("\n".join(problems))
    return owner


def lay_in(root, owner):
    """Replace each tutorial's generated files in ``root`` with those of the shard that ran it."""
    root = Path(root)
    for tutorial, shard in owner.items():
        for old in _generated_files(root / tutorial.gallery, tutorial.stem):
            old.unlink()
        for new in _generated_files(shard / tutorial.gallery, tutorial.stem):
            target = root / tutorial.gallery / new.relative_to(shard / tutorial.gallery)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(new, target)


def combine(root, shards, out, sphinxopts):
    root, out = Path(root), Path(out)
    shards = [Path(s) for s in shards]
    owner = owners(root, shards)
    lay_in(root, owner)
    width = max(len(t.source) for t in owner) if owner else 0
    for tutorial, shard in owner.items():
        print(f"merge: {tutorial.source:<{width}}  from {shard}")
    # Nothing executes: a page whose checksum is current is reused, any other would be
    # rendered without output, and the validator below would name it.
    env = {**os.environ, "GALLERY_PATTERN": NOTHING}
    cmd = [
        sys.executable,
        "-m",
        "sphinx",
        "-b",
        "html",
        *shlex.split(sphinxopts),
        str(root),
        str(out),
    ]
    print("merge: " + " ".join(cmd), flush=True)
    if subprocess.run(cmd, cwd=root, env=env).returncode != 0:
        raise MergeError(
            "the Sphinx build of the merged site failed (its output is above)"
        )
    return validate.main([str(out), "--source-root", str(root)])


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m tools.merge", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "shards", nargs="*", help="shard outputs (folders written by --save)"
    )
    parser.add_argument("--out", help="where the merged site goes, e.g. _build/html")
    parser.add_argument(
        "--save",
        metavar="DIR",
        help="save this checkout's generated galleries as a shard output",
    )
    parser.add_argument(
        "--sphinxopts",
        default="-W --keep-going",
        help="options for sphinx-build (default: %(default)s)",
    )
    parser.add_argument(
        "--root", default=".", help="the project (default: the current directory)"
    )
    args = parser.parse_args(argv)
    try:
        if args.save:
            if args.shards or args.out:
                parser.error("--save takes no shard folders and no --out")
            print(
                f"merge: saved the generated galleries in {save(args.root, args.save)}"
            )
            return 0
        if not args.shards or not args.out:
            parser.error("give the shard outputs and --out (or --save DIR)")
        status = combine(args.root, args.shards, args.out, args.sphinxopts)
    except MergeError as exc:
        for line in str(exc).splitlines():
            print(f"merge: {line}", file=sys.stderr)
        print(
            "merge: no site was merged; rebuild the shards named above from this checkout.",
            file=sys.stderr,
        )
        return 1
    if status == 0:
        print(f"merge: {len(args.shards)} shard(s) merged into {args.out}")
    return status


if __name__ == "__main__":
    sys.exit(main())
