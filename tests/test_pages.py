"""Reading order and needs: every tutorial is listed once in tools.gallery.PAGES, and the
home page's cards follow that order, each with its needs."""

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
