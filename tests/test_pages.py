"""Reading order and needs: every tutorial is listed once in tools.gallery.PAGES, and the
home page's cards follow that order, each with its needs."""

import json
import re

from conftest import ROOT

from sphinxext.order import ReadingOrder
from tools import gallery


def test_every_tutorial_has_a_place_and_its_needs():
    sources = [t.source for t in gallery.tutorials(ROOT)]
    assert sources, "no tutorials found"
    assert sorted(sources) == sorted(gallery.PAGES), "PAGES and the tutorials differ"
    assert all(len(needs) > 10 for needs in gallery.PAGES.values())
    assert next(iter(gallery.PAGES)) == "intermediate_source/torch_compile_tutorial.py"


def test_the_gallery_index_sorts_in_reading_order():
    key = ReadingOrder(str(ROOT / "intermediate_source"))
    names = ["triton_custom_op_tutorial.py", "torch_compile_tutorial.py", "zz_new.py"]
    assert sorted(names, key=key) == [
        "torch_compile_tutorial.py",
        "triton_custom_op_tutorial.py",
        "zz_new.py",
    ]


def test_home_page_cards_follow_reading_order_and_show_needs():
    text = (ROOT / "index.rst").read_text()
    links = re.findall(r":link: (\S+)", text)
    needs = re.findall(r"\.\. page-needs:: (\S+)", text)
    assert links and links == needs, "each card names its own page in page-needs"
    order = [gallery.tutorial_of(d, ROOT).source for d in links]
    for folder in gallery.GALLERIES:
        shown = [s for s in order if s.startswith(folder)]
        assert shown == [s for s in gallery.PAGES if s.startswith(folder)], folder


def _record(device, torch_version, value, loop=(40.0, 41.0), load=(0.5, 0.6), **kw):
    return gallery.RunRecord(
        source="intermediate_source/llm_decode_tutorial.py",
        checksum="x",
        passed=True,
        device=device,
        torch=torch_version,
        triton=None,
        python="3.12",
        date="2026-11-28",
        seconds=60.0,
        peak_memory_mib=None,
        peak_memory_kind=None,
        how="build",
        **{
            "headlines": {"tokens/s": [value, "tokens/s"], "% of copy": [80.5, "%"]},
            "host": {"cores": 2, "loop_ms": list(loop), "load": list(load)},
            **kw,
        },
    )


def test_a_pages_results_across_machines_show_each_run_and_its_host():
    from sphinxext.across import table

    gpu = _record("NVIDIA H100 80GB HBM3", "2.11.0", 1099.0)
    slow = _record("CPU (laptop)", "2.9.1", 12.5, loop=(90.0, 130.0), load=(5.0, 5.0))
    text = table([gpu, slow], own=gpu)
    assert "(shown below)" in text.split("NVIDIA H100")[1].split("\n")[0]
    assert "1,099 tokens/s" in text and "12.5 tokens/s" in text and "80.5 %" in text
    assert "a slower host: 2.2x the fastest run's loop" in text
    assert "busy: load 5.0 on 2 cores" in text
    assert "unsteady: loop 90 ms before the page, 130 after" in text
    noisy = _record("NVIDIA H100 80GB HBM3", "2.11.0", 1.0, loop=(84.0, 41.0))
    text = table([gpu, noisy], own=gpu)  # the faster reading is the host's speed
    assert "loop 41 ms; unsteady: loop 84 ms before the page, 41 after" in text
    assert "a slower host" not in text
    assert table([_record("CPU", "2.9.1", 1.0, headlines=None)]) == ""


def test_the_site_results_page_takes_its_numbers_from_the_records(monkeypatch):
    import sphinxext.across as across
    import sphinxext.verified_on as verified_on

    runs = [
        _record("NVIDIA H100 80GB HBM3", "2.11.0", 1099.0),
        _record("CPU (x)", "2.15.0", 20.0),
        _record("CPU (x)", "2.9.1", 15.0),
    ]
    monkeypatch.setattr(
        verified_on,
        "shown_records",
        lambda srcdir, t: runs if t.stem == "llm_decode_tutorial" else [],
    )
    rows = {doc: (label, cells) for doc, label, cells in across.summary_rows(ROOT)}
    assert len(rows) == len(gallery.PAGES)
    label, cells = rows["intermediate/llm_decode_tutorial"]
    assert label == "tokens/s"
    assert cells == {
        "1 GPU": "1,099 tokens/s (NVIDIA H100 80GB HBM3)",
        "CPU, oldest PyTorch": "15.0 tokens/s (2.9.1)",
        "CPU, newest PyTorch": "20.0 tokens/s (2.15.0)",
    }
    assert rows["intermediate/torch_compile_tutorial"][0] == "(no headline result yet)"


def test_headline_results_reach_the_file_the_build_names(tmp_path, monkeypatch):
    import measure

    path = tmp_path / "headlines.json"
    monkeypatch.setenv(measure.HEADLINES_FILE, str(path))
    monkeypatch.setattr(measure, "HEADLINES", {})
    res = measure.Results()
    for name, ms in (("compiled", 1.0), ("eager", 2.0)):
        res[name] = measure.Row(name, ms, 0.0, [ms] * 9, ms)
    res.versus("compiled", "eager", headline_as="speed-up")
    measure.headline("cold compile", 12.345678, "s")
    assert json.loads(path.read_text()) == {
        "speed-up": [2.0, "x speed-up"],
        "cold compile": [12.3457, "s"],
    }


def test_against_groups_variants_by_their_intervals(tmp_path, monkeypatch):
    import measure

    monkeypatch.setenv(measure.HEADLINES_FILE, str(tmp_path / "h.json"))
    monkeypatch.setattr(measure, "HEADLINES", {})
    res = measure.Results()
    wobble = [0.9, 1.1] * 4 + [1.0]
    for name, ms in (("eager", 2.0), ("fast", 1.0), ("same", 2.0), ("slow", 4.0)):
        windows = [ms * w if name == "same" else ms for w in wobble]
        res[name] = measure.Row(name, ms, 0.0, windows, ms, parts={"matmul": ms})
    line = res.against("eager", "float32 eager", headlines=True)
    assert line == (
        "faster than float32 eager: fast (0.50x); tied with float32 eager: same "
        "(1.00x); slower than float32 eager: slow (2.00x, +2.000 ms; matmul +2.000 ms)"
    )
    del res["slow"]
    assert "slower" not in res.against("eager")
    assert measure.HEADLINES["fast vs eager"] == [2.0, "x speed-up"]
    assert measure.HEADLINES["same vs eager"][1] == "x, a tie"
    res["slow"] = measure.Row("slow", 4.0, 0.0, [4.0] * 9, 4.0, parts={"matmul": 4.0})
    res.against("eager", headlines=True)
    assert measure.HEADLINES["slow vs eager"] == [2.0, "x slower"]
    res["slow"].parts = {"compiled code": 4.0, "matmul": 0.0}  # replaced, not grown
    assert (
        "slow (2.00x, +2.000 ms; interval 2.00-2.00x, its parts cancel"
        in res.against("eager")
    )


def test_a_slowdown_kept_as_a_speed_up_below_1_reads_as_slower():
    from sphinxext.across import _value

    assert _value([0.8, "x speed-up"]) == "1.25 x slower"
    assert _value([2.5, "x speed-up"]) == "2.5 x speed-up"
    assert (
        _value([26.93, "s"]) == "26.9 s"
        and _value([1175.4, "tokens/s"]) == "1,175 tokens/s"
    )
