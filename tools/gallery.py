"""The gallery's facts, in one place: which tutorials exist, the page each becomes, the
checksum sphinx-gallery keeps of its source, and the record of one run of it.

This module owns the gallery folders and the ignore pattern (conf.py imports them into
``sphinx_gallery_conf``) and reads the packages a reader needs from requirements.txt (the
notebooks' first cell). Standard library only: the shard planner runs on a bare runner's
Python, and tools.verify runs this module inside the virtual environments it makes.

A tutorial *ran* when a passing run record carries the checksum of its current source:
:func:`ran` is the one place that decides it (build, merge, validator and tests ask it).

The device a run record names comes from :func:`run_device`, the one place that knows which
path a tutorial takes on a machine (the build's records and tools.verify ask it): a tutorial
labelled ``multi-gpu`` runs on two GPUs where the machine has them, and on two CPU processes
otherwise, which its record then names as a CPU run.
"""

import ast
import datetime
import hashlib
import json
import os
import platform
import re
from dataclasses import asdict, dataclass, fields
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RECORDS = "records"  # the committed run records: records/<environment>.json
REPORT = "build_report.json"  # the build's records, in the built site
RECORD_SUFFIX = ".record.json"  # a build's record beside the generated page

# {examples folder: gallery folder}: sphinx-gallery builds recipes_source/x.py into recipes/x.
GALLERIES = {"recipes_source": "recipes", "intermediate_source": "intermediate"}
# Sources sphinx-gallery skips (searched in the source's path): files and folders named "_*".
IGNORE_PATTERN = r"(^|/)_"
# The block of requirements.txt that lists what the tutorials import.
TUTORIAL_REQUIREMENTS = "# What the tutorials import"
# A tutorial that needs a particular runner names its label in a sphinx-gallery config
# comment (tools/shard.py gives it its own shards): ``# sphinx_gallery_runner_label = "multi-gpu"``.
_RUNNER_LABEL = re.compile(
    r"^[ \t]*#\s*sphinx_gallery_runner_label\s*=\s*(.+?)\s*$", re.MULTILINE
)
# A "multi-gpu" tutorial takes its NCCL path on this many GPUs when the machine has at least
# that many (and NCCL), and runs that many CPU processes with gloo otherwise.
MULTI_GPU = "multi-gpu"
MULTI_GPU_COUNT = 2
# How a run record's "how" reads in the "Verified on" table.
RUN_AS = {"build": "site build", "script": "script", "notebook": "notebook"}


# Each gallery's pages in reading order (its index and the home page's cards follow it),
# with what a page needs beyond PyTorch: shown under its title and on its card. On a CPU,
# Inductor compiles C++, so every page that compiles there needs a C++ compiler.
_ANY = "any OS; a GPU is optional (the page runs on CPU); on CPU, a C++ compiler"
PAGES = {
    "intermediate_source/torch_compile_tutorial.py": _ANY,
    "intermediate_source/debugging_tutorial.py": _ANY,
    "intermediate_source/dynamic_shapes_tutorial.py": _ANY,
    "intermediate_source/compiled_autograd_tutorial.py": _ANY,
    "intermediate_source/compiled_training_tutorial.py": _ANY,
    "intermediate_source/llm_decode_tutorial.py": "any OS; one CUDA GPU with 24 GB for "
    "its 2.2 B-parameter model (the CPU runs a small one); on CPU, a C++ compiler",
    "intermediate_source/triton_custom_op_tutorial.py": "Triton (wheels for Linux); a GPU "
    "is optional (the CPU checks the kernels in Triton's interpreter); on CPU, a C++ "
    "compiler",
    "intermediate_source/export_aoti_tutorial.py": "Linux; a C++ compiler that links "
    "libstdc++ dynamically; a GPU is optional",
    "intermediate_source/distributed_compile_tutorial.py": "Linux; two CUDA GPUs with about 58 "
    "GB free each for the GPU path (otherwise two CPU processes); on CPU, a C++ compiler",
    # compile_time first: the recipes stand alone, and its CPU run lasts about as long as
    # the other four's together, so `make html JOBS=2` (the tests' build) runs it beside
    # them from the start instead of last, alone.
    "recipes_source/compile_time.py": _ANY,
    "recipes_source/compiling_optimizer.py": _ANY,
    "recipes_source/compiling_optimizer_lr_scheduler.py": _ANY,
    "recipes_source/foreach_map.py": _ANY,
    "recipes_source/measuring.py": _ANY,
}


def reading_order(source):
    """A sort key: reading order; a source PAGES lacks comes after, by name (a test
    requires every tutorial of the site in PAGES)."""
    order = list(PAGES)
    return (order.index(source), "") if source in order else (len(order), source)


def requirements(root=ROOT):
    """The lines of requirements.txt's "What the tutorials import" block: the packages a
    reader needs, with their lower bounds (``torch>=2.9``)."""
    lines = (Path(root) / "requirements.txt").read_text(encoding="utf-8").splitlines()
    if TUTORIAL_REQUIREMENTS not in lines:
        raise ValueError(f"requirements.txt has no {TUTORIAL_REQUIREMENTS!r} block")
    block = []
    for line in lines[lines.index(TUTORIAL_REQUIREMENTS) + 1 :]:
        if not line.strip():
            break
        if not line.lstrip().startswith("#"):
            block.append(line.strip())
    return block


def minimum(package, root=ROOT):
    """The lower bound requirements.txt sets on ``package``: "2.9" for torch."""
    for line in requirements(root):
        match = re.fullmatch(
            rf"{re.escape(package)}\s*>=\s*([\w.]+)", line.split(";")[0].strip()
        )
        if match:
            return match.group(1)
    raise ValueError(
        f"requirements.txt sets no lower bound on {package} (as {package}>=X.Y)"
    )


def first_notebook_cell(root=ROOT):
    """The cell that opens every notebook: it states the PyTorch the page needs and installs
    requirements.txt's tutorial packages at their lower bounds, so an older PyTorch (an older
    Colab image) is upgraded. Lines with an environment marker are left out: triton, which
    PyTorch's own wheels bring."""
    packages = " ".join(f'"{r}"' for r in requirements(root) if ";" not in r)
    return (
        f"# This page needs PyTorch {minimum('torch', root)} or later.\n"
        "# This cell installs what it imports, upgrading an older PyTorch (then restart the kernel).\n"
        f"%pip install -q {packages}"
    )


def runner_label(source_file):
    """The runner label a tutorial asks for ("multi-gpu"), or None. ValueError when the
    comment is there but its value is not a quoted label."""
    match = _RUNNER_LABEL.search(Path(source_file).read_text(encoding="utf-8"))
    if match is None:
        return None
    try:
        label = ast.literal_eval(match.group(1))
    except (ValueError, SyntaxError):
        label = None
    if not isinstance(label, str) or not label.strip():
        raise ValueError(
            f"{source_file}: sphinx_gallery_runner_label must be a quoted runner label, got {match.group(1)}"
        )
    return label.strip()


def checksum(path):
    """The md5 sphinx-gallery keeps of a source (``get_md5sum(path, mode="t")``)."""
    text = Path(path).read_text(encoding="utf-8", errors="surrogateescape")
    return hashlib.md5(text.encode("utf-8", errors="surrogateescape")).hexdigest()


@dataclass(frozen=True)
class Tutorial:
    source: str  # "recipes_source/foreach_map.py", relative to the project
    gallery: str  # "recipes": where sphinx-gallery generates its page

    @property
    def stem(self):
        return Path(self.source).stem

    @property
    def docname(self):
        return f"{self.gallery}/{self.stem}"

    @property
    def page(self):  # as the validator and the built site name it
        return f"{self.docname}.html"

    def generated(self, root=ROOT):
        """Where sphinx-gallery writes its files: <root>/recipes/<stem> (+ suffixes)."""
        return Path(root) / self.gallery / self.stem

    def checksum(self, root=ROOT):
        return checksum(Path(root) / self.source)


def tutorials(root=ROOT):
    """Every tutorial sphinx-gallery builds, in gallery order."""
    root = Path(root).resolve()
    found = []
    for src, dst in GALLERIES.items():
        for path in sorted((root / src).glob("*.py")):
            # sphinx-gallery matches ignore_pattern against the normalised full path.
            if not re.search(IGNORE_PATTERN, os.path.normpath(path)):
                found.append(Tutorial(f"{src}/{path.name}", dst))
    return found


def tutorial_of(source_or_page, root=ROOT):
    for t in tutorials(root):
        if source_or_page in (t.source, t.page, t.docname):
            return t
    return None


# --- the run record -----------------------------------------------------------------------


@dataclass(frozen=True)
class RunRecord:
    """One run of one tutorial: written by the build (sphinxext.record) and by tools.verify."""

    source: str  # "recipes_source/foreach_map.py"
    checksum: str  # sphinx-gallery's md5 of the source that ran
    passed: bool
    device: str  # "NVIDIA H100 80GB HBM3", "CPU (AMD EPYC 7B13)"
    torch: str
    triton: str | None
    python: str
    date: str  # YYYY-MM-DD, UTC
    seconds: float
    peak_memory_mib: float | None  # None: not measured
    # Host memory. The build (sphinxext.memory), above what the build process held when the
    # page started: "pss": the largest sum, sampled while the page ran, of the proportional
    # set sizes of the build process and of the processes the page had running at that moment
    # (shared pages counted once); "rss-sampled": the same with resident sets, where the
    # kernel has no smaps_rollup. "rss": the peak resident set of the script's own process
    # (tools.verify). Older records: "cuda" (the CUDA allocator's peak, as the host figure),
    # "rss-peak" (resident high-water marks, every started process's added: an over-count),
    # "rss-growth". None: not measured.
    peak_memory_kind: str | None
    how: str  # "build": executed by sphinx-gallery; "script": `python file.py`, as a reader
    # The machine's GPUs ("1 x NVIDIA H100 80GB HBM3") when the tutorial took its CPU path
    # on a machine with GPUs (too few for it); the device is then the CPU. None otherwise.
    cpu_path_on: str | None = None
    # Seconds the page spent under torch.profiler in the build process (sphinxext.profiling):
    # starting it, the profiled steps, reading its events. None: not measured (tools.verify,
    # and a multi-GPU page, whose workers profile).
    profiler_seconds: float | None = None
    # The peak of PyTorch's CUDA allocator in the build process during the page, above its
    # start (MiB). None: the page ran on no GPU of the build process (a CPU page, a multi-GPU
    # page's workers, tools.verify).
    gpu_peak_memory_mib: float | None = None
    # The page's headline results, {label: [value, unit]} (measure.headline). None: the
    # page kept none, or the run predates them.
    headlines: dict | None = None
    # The host while the page ran (host_facts before and after it): {"cores", "loop_ms":
    # [before, after], "load": [before, after]}. None: not measured.
    host: dict | None = None

    @classmethod
    def from_dict(cls, data):
        return cls(**{f.name: data.get(f.name) for f in fields(cls)})

    def to_dict(self):
        return asdict(self)

    def current(self, root=ROOT):
        """True when the record is of the tutorial's source as it is now."""
        path = Path(root) / self.source
        return path.is_file() and checksum(path) == self.checksum

    @property
    def environment(self):
        return environment_name(self.device, self.torch)

    @property
    def run_as(self):
        """How the run reads in the "Verified on" table: "site build", "script", "notebook",
        and for a CPU path taken on a GPU machine "site build (CPU path; the machine has 1 GPU)"."""
        text = RUN_AS.get(self.how, self.how)
        if self.cpu_path_on:
            count = int(re.match(r"\d+", self.cpu_path_on).group(0))
            text += (
                f" (CPU path; the machine has {count} GPU{'' if count == 1 else 's'})"
            )
        return text

    @property
    def row(self):
        """The table's row this record fills: one per device (with its GPU count), PyTorch
        and way of running. A newer record of the same tutorial and row replaces the older."""
        return (self.device, self.torch, self.run_as)

    @property
    def torch_release(self):
        """(major, minor) of the PyTorch version, e.g. (2, 9)."""
        return tuple(int(p) for p in re.findall(r"\d+", self.torch)[:2])


# A fixed single-thread loop, timed in a process of its own: in the build's process,
# threads of its own (the memory sampler, compile workers' helpers) would share the GIL.
_LOOP = """
import statistics, time
def loop():  # in a function: local names, as fast as the interpreter runs Python
    start, total = time.perf_counter(), 0
    for i in range(300_000):
        total += i * i % 7
    return (time.perf_counter() - start) * 1e3
print(statistics.median(loop() for _ in range(5)))
"""


def host_facts():
    """The host's speed and load now: the loop's time (median of five, ms; a slower or
    busier host takes longer) and the 1-minute load average."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _LOOP], capture_output=True, text=True)
    loop = float(done.stdout) if done.returncode == 0 else float("nan")
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    return loop, load


def host_record(before, after):
    """The record's ``host`` from host_facts() taken before and after a page."""
    return {
        "cores": os.cpu_count(),
        "loop_ms": [round(before[0], 1), round(after[0], 1)],
        "load": [None if x[1] is None else round(x[1], 2) for x in (before, after)],
    }


def _cpu_name():
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        model = platform.processor()
    return f"CPU ({model})" if model else "CPU"


def machine():
    """This interpreter's machine, as JSON-ready facts: the CPU, the GPUs it sees (name and
    count), whether NCCL is there, and the versions. :func:`run_device` reads it."""
    import torch
    import torch.distributed as dist

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    nccl = bool(gpus) and dist.is_available() and dist.is_nccl_available()
    try:
        import triton

        triton_version = triton.__version__
    except ImportError:
        triton_version = None
    return {
        "cpu": _cpu_name(),
        "gpu": torch.cuda.get_device_name() if gpus else None,
        "gpus": gpus,
        "nccl": nccl,
        "torch": torch.__version__,
        "triton": triton_version,
        "python": platform.python_version(),
    }


def run_device(machine, label=None):
    """The device a tutorial with runner label ``label`` runs on, on ``machine``: a dict of
    ``device`` (as its record names it), ``gpus`` (how many it uses: 0 on the CPU) and
    ``cpu_path_on`` (the machine's GPUs when the tutorial took its CPU path on a machine with
    GPUs, else None).

    The one rule, which the tutorials' own device choice follows: a tutorial runs on the
    machine's first GPU; one labelled "multi-gpu" takes its NCCL path on MULTI_GPU_COUNT GPUs
    when the machine has that many and NCCL, and its CPU path (gloo) otherwise."""
    gpus, gpu = machine["gpus"], machine["gpu"]
    if not gpus:
        return {"device": machine["cpu"], "gpus": 0, "cpu_path_on": None}
    if label != MULTI_GPU:
        return {"device": gpu, "gpus": 1, "cpu_path_on": None}
    if gpus >= MULTI_GPU_COUNT and machine["nccl"]:
        return {
            "device": f"{MULTI_GPU_COUNT} x {gpu}",
            "gpus": MULTI_GPU_COUNT,
            "cpu_path_on": None,
        }
    return {"device": machine["cpu"], "gpus": 0, "cpu_path_on": f"{gpus} x {gpu}"}


def environment(label=None, machine_facts=None):
    """Device and versions, as a record states them, of a run of a tutorial with runner label
    ``label`` on ``machine_facts`` (default: this interpreter's :func:`machine`)."""
    facts = machine_facts if machine_facts is not None else machine()
    run = run_device(facts, label)
    return {
        "device": run["device"],
        "cpu_path_on": run["cpu_path_on"],
        "torch": facts["torch"],
        "triton": facts["triton"],
        "python": facts["python"],
    }


def misnamed(record, label):
    """Whether ``record``, of a tutorial with runner label ``label``, names one GPU where the
    tutorial runs on MULTI_GPU_COUNT GPUs or on the CPU: a record from before records named
    the path a run took (on a one-GPU machine that run took the CPU path). Pages leave such
    records out and the validator names them."""
    return (
        label == MULTI_GPU
        and not record.device.startswith("CPU")
        and re.match(r"\d+ x ", record.device) is None
    )


def environment_name(device, torch):
    """The file in records/ a run belongs to: one per device kind and PyTorch version
    ("cpu-torch-2.9.1+cu128.json": every CPU; "2-x-nvidia-h100-80gb-hbm3-torch-...": two GPUs)."""
    device = "cpu" if device.startswith("CPU") else device
    return re.sub(r"[^a-z0-9.+]+", "-", f"{device}-torch-{torch}".lower())


def today():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")


def ran(tutorial, records, root=ROOT):
    """Whether ``records`` prove that the tutorial's current source ran and passed."""
    current = tutorial.checksum(root)
    return any(
        r.source == tutorial.source and r.passed and r.checksum == current
        for r in records
    )


def read_record(path):
    return RunRecord.from_dict(json.loads(Path(path).read_text(encoding="utf-8")))


def write_record(path, record):
    Path(path).write_text(json.dumps(record.to_dict(), indent=2) + "\n")


def read_report(path):
    """The records of a build report (``build_report.json``); [] when there is none."""
    path = Path(path)
    if not path.is_file():
        return []
    data = json.loads(path.read_text(encoding="utf-8"))
    return [RunRecord.from_dict(r) for r in data.get("tutorials", [])]


def write_report(path, records):
    report = {"tutorials": [r.to_dict() for r in records]}
    Path(path).write_text(json.dumps(report, indent=2) + "\n")


def read_records(root=ROOT):
    """{records/<environment>.json: [RunRecord]} of the committed records."""
    folder = Path(root) / RECORDS
    return {p: read_report(p) for p in sorted(folder.glob("*.json"))}


def save_records(records, root=ROOT):
    """Add ``records`` to the committed ones: one file per environment, one record per
    tutorial and table row in it (:attr:`RunRecord.row`: a newer run of a tutorial on the
    same device, PyTorch and way of running replaces the older, whatever source it ran).
    Returns the files."""
    folder = Path(root) / RECORDS
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for env in sorted({r.environment for r in records}):
        path = folder / f"{env}.json"
        kept = {(r.source, r.row): r for r in read_report(path)}
        kept.update({(r.source, r.row): r for r in records if r.environment == env})
        write_report(path, sorted(kept.values(), key=lambda r: (r.source, r.row)))
        written.append(path)
    return written


# The measurement core (measure.py), which every tutorial imports. A download carries it.
CORE = "measure.py"
_IMPORTS_CORE = re.compile(r"^(import measure\b|from measure import )", re.MULTILINE)
CORE_CELL_MARK = "# The site's measurement core"


def imports_core(text):
    return _IMPORTS_CORE.search(text) is not None


def core_block(root=ROOT):
    """The code that makes ``import measure`` work in a download: measure.py's source,
    registered as a module, with a comment that says why it is there."""
    source = (Path(root) / CORE).read_text(encoding="utf-8")
    if "'''" in source or source.endswith("\\"):
        raise ValueError(
            f"{CORE}: ''' or a trailing backslash cannot be carried in r'''...'''"
        )
    return (
        f'{CORE_CELL_MARK} (``measure``, explained by the recipe "Measuring a compiled\n'
        '# step"), carried here so that this download runs with no other file beside it.\n'
        "import linecache as _linecache\n"
        "import sys as _sys\n"
        "import types as _types\n"
        "\n"
        f"_source = r'''{source}'''\n"
        'measure = _sys.modules["measure"] = _types.ModuleType("measure")\n'
        'measure.__file__ = "measure.py"  # tracebacks and inspect.getsource find the text\n'
        "_linecache.cache[measure.__file__] = (len(_source), None, _source.splitlines(True), measure.__file__)\n"
        'exec(compile(_source, measure.__file__, "exec"), measure.__dict__)\n'
    )


def download_script(text, root=ROOT):
    """A tutorial's source as a reader downloads it: the core's block after the docstring."""
    if not imports_core(text) or CORE_CELL_MARK in text:
        return text
    tree = ast.parse(text)
    first = tree.body[0] if tree.body else None
    docstring = (
        isinstance(first, ast.Expr)
        and isinstance(first.value, ast.Constant)
        and isinstance(first.value.value, str)
    )
    lines = text.splitlines(keepends=True)
    at = first.end_lineno if docstring else 0
    block = "\n# %%\n" + core_block(root) + "\n"
    return "".join(lines[:at]) + block + "".join(lines[at:])


def download_notebook(notebook, root=ROOT):
    """A notebook (nbformat JSON as a dict) with the core's block as a code cell after the
    install cell and the title's cell."""
    cells = notebook.get("cells", [])
    code = "\n".join(
        "".join(c.get("source", "")) for c in cells if c.get("cell_type") == "code"
    )
    if not imports_core(code) or CORE_CELL_MARK in code:
        return notebook
    cell = {
        "cell_type": "code",
        "execution_count": None,
        "metadata": {"collapsed": False},
        "outputs": [],
        "source": core_block(root),
    }
    # after the install cell and the page's title and cards (its docstring's cell)
    at = 2 if len(cells) > 1 and cells[1].get("cell_type") == "markdown" else 1
    notebook["cells"] = cells[:at] + [cell] + cells[at:]
    return notebook
