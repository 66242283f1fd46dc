"""The order of each gallery's index: reading order, from ``tools.gallery.PAGES``.

Named in conf.py as sphinx-gallery's ``within_subsection_order``; sphinx-gallery makes one
per gallery folder and sorts that folder's file names with it.
"""

from pathlib import Path

from tools import gallery


class ReadingOrder:
    def __init__(self, src_dir):
        self.folder = Path(src_dir).name

    def __call__(self, filename):
        return gallery.reading_order(f"{self.folder}/{filename}")

    def __repr__(self):  # sphinx-gallery keys its cache on the repr
        return "ReadingOrder"
