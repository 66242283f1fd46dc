"""The site's Sphinx extensions (conf.py names them).

With ``make html JOBS=2``, sphinx-gallery writes each page and notebook in a worker process
that never runs Sphinx's ``setup()`` functions, but imports this package: the worker
unpickles conf.py's ``show_memory`` object (``sphinxext.memory``) and resolves the reset
functions by name. So importing the package installs the notebook wrappers
(``sphinxext.notebooks``), and a worker writes the same notebooks as the main process.
"""

from sphinxext import notebooks

notebooks.install()
