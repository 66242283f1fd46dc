"""Run the tutorials as a reader runs them, on a given PyTorch, and record each run.

    python -m tools.verify --torch 2.9.1 [--pattern REGEX]     (make verify TORCH=2.9.1)
    python -m tools.verify --torch nightly --index-url https://download.pytorch.org/whl/nightly/cpu
    python -m tools.verify --python .venv/bin/python           the interpreter you already have
    python -m tools.verify --from-build _build/html            export a site build's records

Each tutorial runs as ``python file.py`` in an empty temporary folder (which is also its
TMPDIR, so Inductor's compile cache starts empty), with MPLBACKEND=Agg, in a virtual
environment of its own: .verify/venv-torch-<version>, kept for the next run. torch and
torchvision come from --index-url (default PyPI), or only from --find-links folders when
no index is named; the rest of what the tutorials import (requirements.txt) from PyPI and
those folders. pip ignores the machine's pip configuration (a cap on torch, say).

The records (tools/gallery.py: checksum of the source, pass/fail, device, versions, date,
seconds, peak resident memory) go into records/<device>-torch-<version>.json, replacing
that environment's older record of the same tutorial and table row; the pages show those
whose checksum matches the current source. The device a record names is the one the
tutorial ran on (tools.gallery.run_device, as in a site build): a "multi-gpu" tutorial on a
machine with fewer than two GPUs ran its CPU path, and its record names the CPU.

--from-build copies the records of a site build (its build_report.json) into records/
the same way: that is how a GPU build's runs land there.

Exit status 0 when every tutorial passed, 1 otherwise (the records are written either way).
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from tools import gallery

VENVS = ".verify"  # git-ignored
TAIL = 25  # lines of a failing tutorial's output to print


class VerifyError(Exception):
    """Cannot verify as asked; the message says why."""


def reader_requirements(root):
    """What the tutorials import besides torch (tools.gallery.requirements)."""
    try:
        block = gallery.requirements(root)
    except ValueError as exc:
        raise VerifyError(str(exc)) from None
    skip = (
        "torch",
        "torchvision",
        "triton",
    )  # installed first, from the index asked for
    return [r for r in block if re.match(r"[A-Za-z0-9_.-]+", r).group(0) not in skip]


def _pip(python, args, log):
    # PIP_CONFIG_FILE=/dev/null: a machine-wide pip configuration (a constraint capping
    # torch, say) must not decide which PyTorch is verified.
    env = {**os.environ, "PIP_CONFIG_FILE": os.devnull}
    cmd = [str(python), "-m", "pip", "install", "--disable-pip-version-check", *args]
    print("verify: " + " ".join(cmd), flush=True)
    with open(log, "a") as out:
        proc = subprocess.run(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)
    if proc.returncode != 0:
        raise VerifyError(
            f"pip failed (exit {proc.returncode}); its output is in {log}"
        )


def make_venv(root, args):
    """The virtual environment for --torch, made (or updated) as needed; its python."""
    venv = Path(root) / VENVS / f"venv-torch-{args.torch}"
    python = venv / "bin" / "python"
    nightly = args.torch == "nightly"
    torch = ["--pre", "torch"] if nightly else [f"torch=={args.torch}"]
    torch.append(
        f"torchvision=={args.torchvision}" if args.torchvision else "torchvision"
    )
    index = ["--index-url", args.index_url] if args.index_url else []
    links = [
        a
        for d in args.find_links or []
        for a in ("--find-links", str(Path(d).resolve()))
    ]
    rest = [*links, *reader_requirements(root)]
    wanted = [*index, *links, *torch, *rest]
    stamp = venv / "verify-installed.json"
    if not nightly and stamp.is_file() and json.loads(stamp.read_text()) == wanted:
        return python
    if not python.is_file():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    log = venv / "install.log"
    # With wheels at hand and no index named, PyTorch comes from those wheels only: pip
    # would otherwise take the same file from PyPI as readily.
    offline = ["--no-index"] if links and not index else []
    _pip(python, ["--upgrade", *offline, *index, *links, *torch], log)
    # The rest from the default index: a PyTorch-only index does not have them all.
    _pip(python, rest, log)
    stamp.write_text(json.dumps(wanted))
    return python


def probe(python, root):
    """The machine and versions, as the interpreter under test sees them
    (tools.gallery.machine)."""
    code = (
        "import json; from tools.gallery import machine; print(json.dumps(machine()))"
    )
    proc = subprocess.run(
        [str(python), "-c", code], cwd=root, capture_output=True, text=True
    )
    if proc.returncode != 0:
        raise VerifyError(f"{python} cannot import torch:\n{proc.stderr[-2000:]}")
    return json.loads(proc.stdout.splitlines()[-1])


def run_one(python, root, tutorial, facts, timeout, logs):
    """Run one tutorial as ``python file.py`` on the machine ``facts`` describes (the
    interpreter's tools.gallery.machine); return its RunRecord."""
    source = Path(root) / tutorial.source
    checksum = gallery.checksum(source)
    try:
        env_info = gallery.environment(gallery.runner_label(source), facts)
    except ValueError as exc:
        raise VerifyError(str(exc)) from None
    with tempfile.TemporaryDirectory(prefix="verify-") as tmp:
        script = Path(tmp) / source.name
        # the script a reader downloads: the measurement core carried inside it
        text = source.read_text(encoding="utf-8")
        script.write_text(gallery.download_script(text, root), encoding="utf-8")
        env = {
            k: v
            for k, v in os.environ.items()
            if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")
            and not k.startswith(("TORCHINDUCTOR_", "TRITON_"))
        }
        headlines = Path(tmp) / "headlines.json"
        env.update(MPLBACKEND="Agg", TMPDIR=tmp, TEMP=tmp, TMP=tmp)
        env["MEASURE_HEADLINES"] = str(headlines)  # measure.headline() writes there
        before = gallery.host_facts()
        log = logs / f"{tutorial.stem}.log"
        start = time.perf_counter()
        with open(log, "w") as out:
            proc = subprocess.Popen(
                [str(python), script.name],
                cwd=tmp,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
            timer = threading.Timer(timeout, proc.kill)
            timer.start()
            # wait4: this child's own peak resident set, not the largest of all children.
            _, status, usage = os.wait4(proc.pid, 0)
            seconds = time.perf_counter() - start
            proc.returncode = os.waitstatus_to_exitcode(status)
            timer.cancel()
            if proc.returncode < 0 and seconds >= timeout:
                out.write(f"\nverify: stopped after {timeout:.0f} s\n")
        host = gallery.host_record(before, gallery.host_facts())
        found = json.loads(headlines.read_text()) if headlines.is_file() else None
    return gallery.RunRecord(
        source=tutorial.source,
        checksum=checksum,
        passed=proc.returncode == 0,
        headlines=found,
        host=host,
        **env_info,
        date=gallery.today(),
        seconds=round(seconds, 2),
        peak_memory_mib=round(usage.ru_maxrss / 1024, 1),  # KiB on Linux
        peak_memory_kind="rss",
        how="script",
    )


def verify(root, args):
    root = Path(root).resolve()
    chosen = [
        t
        for t in gallery.tutorials(root)
        if not args.pattern
        or re.search(args.pattern, t.source)
        or re.search(args.pattern, t.page)
    ]
    if not chosen:
        raise VerifyError(f"no tutorial matches {args.pattern!r}")
    python = Path(args.python) if args.python else make_venv(root, args)
    facts = probe(python, root)
    plain = gallery.environment(None, facts)
    gpus = f" ({facts['gpus']} GPUs)" if facts["gpus"] > 1 else ""
    print(
        f"verify: {len(chosen)} tutorial(s) on {plain['device']}{gpus}, "
        f"PyTorch {facts['torch']}, Python {facts['python']}",
        flush=True,
    )
    logs = (
        root
        / VENVS
        / "logs"
        / gallery.environment_name(plain["device"], facts["torch"])
    )
    logs.mkdir(parents=True, exist_ok=True)
    records = []
    for tutorial in chosen:
        record = run_one(python, root, tutorial, facts, args.timeout, logs)
        records.append(record)
        verdict = "passed" if record.passed else "FAILED"
        print(
            f"verify: {verdict}  {record.seconds:8.1f} s  {tutorial.source}", flush=True
        )
        if not record.passed:
            log = logs / f"{tutorial.stem}.log"
            for line in log.read_text(errors="replace").splitlines()[-TAIL:]:
                print(f"    {line}")
            print(f"verify: the whole output is in {log}")
    return records


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m tools.verify",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 1)[1],
    )
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument(
        "--torch", help="the PyTorch to verify: a version (2.9.1) or nightly"
    )
    which.add_argument(
        "--python", help="verify with this interpreter instead of a new venv"
    )
    which.add_argument(
        "--from-build", metavar="SITE", help="export the records of a built site"
    )
    parser.add_argument(
        "--pattern", help="only the tutorials whose source or page path matches"
    )
    parser.add_argument(
        "--torchvision", help="the torchvision version (default: what pip picks)"
    )
    parser.add_argument("--index-url", help="where torch and torchvision come from")
    parser.add_argument(
        "--find-links",
        action="append",
        metavar="DIR",
        help="a folder of wheels to install from",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=1800,
        help="seconds one tutorial may take (default: %(default)s)",
    )
    args = parser.parse_args(argv)
    try:
        if args.from_build:
            records = gallery.read_report(Path(args.from_build) / gallery.REPORT)
            if not records:
                raise VerifyError(
                    f"{args.from_build}/{gallery.REPORT} holds no records"
                )
        else:
            records = verify(Path.cwd(), args)
    except VerifyError as exc:
        print(f"verify: {exc}", file=sys.stderr)
        return 2
    for path in gallery.save_records(records, Path.cwd()):
        print(f"verify: wrote {path}")
    failed = [r.source for r in records if not r.passed]
    if failed:
        print(f"verify: {len(failed)} failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
