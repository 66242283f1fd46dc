"""End a failed build with one line per failing tutorial: file, line, exception, message.

sphinx-gallery prints each failing example's traceback twice (when it fails, and again in
the summary it raises at the end of the build); an Inductor C++ compile error alone runs to
pages of compiler output. This extension keeps all of that and adds, as the very last lines
the build prints, one line per failing tutorial::

    Tutorial failed: recipes_source/foo.py, line 42: ValueError: first line of the message

Sphinx prints the summary's exception after every event handler has run, so the lines are
printed when the interpreter exits (``atexit``), after Sphinx's own last words.
"""

import atexit
import os
import re
import sys

# The longest message excerpt printed: a message can be a whole compiler log on one line.
MAX_MESSAGE = 300
_FRAME = re.compile(r'^\s*File "(?P<file>.+)", line (?P<line>\d+)')


def summarize(src_file, formatted_exception, srcdir="."):
    """One line for one failure, from the traceback text sphinx-gallery keeps.

    The text is ``Traceback ...``, the frames (indented), then the exception's own lines
    (``Type: message``, more message lines). The line reported is the deepest frame in the
    tutorial itself: where the tutorial called the helper that raised.
    """
    lines = formatted_exception.splitlines()
    line_no = None
    rest = []
    for i, text in enumerate(lines):
        if i and text.strip() and not text[0].isspace():
            rest = [line.strip() for line in lines[i:] if line.strip()]
            break
        frame = _FRAME.match(text)
        if frame and os.path.abspath(frame["file"]) == os.path.abspath(src_file):
            line_no = frame["line"]
    exception = rest[0] if rest else ""
    if exception.endswith(":") and len(rest) > 1:
        # "Type:" alone: the message starts on the next line.
        exception = f"{exception} {rest[1]}"
    if len(exception) > MAX_MESSAGE:
        exception = exception[: MAX_MESSAGE - 3].rstrip() + "..."
    where = os.path.relpath(src_file, srcdir)
    if line_no is not None:
        where += f", line {line_no}"
    return f"Tutorial failed: {where}: {exception or 'an exception (no message)'}"


def _print_at_exit(lines):
    sys.stdout.flush()
    for line in lines:
        print(line, file=sys.stderr)
    sys.stderr.flush()


def _collect(app, exception):
    conf = app.config.sphinx_gallery_conf
    failing = conf.get("failing_examples") or {}
    # Sphinx emits build-finished a second time when a handler raised (sphinx-gallery's
    # summary does): report once.
    if (
        not conf.get("plot_gallery")
        or not failing
        or hasattr(app, "_failures_reported")
    ):
        return
    app._failures_reported = True
    lines = [summarize(src, text, app.srcdir) for src, text in sorted(failing.items())]
    atexit.register(_print_at_exit, lines)


def setup(app):
    # Before sphinx-gallery's summary (priority 500), which raises and stops the event.
    app.connect("build-finished", _collect, priority=400)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
