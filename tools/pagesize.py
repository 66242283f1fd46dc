"""How long each tutorial is: source lines, lines of code, functions.

A line of code is a line holding a Python token other than a comment or a docstring; blank
lines, comment lines (the prose of a page) and docstrings do not count. The house style's
budgets (../shared/STYLE.md, "Lean pages") are checked by tests/test_pagesize.py.

    python -m tools.pagesize            # a table of every tutorial
"""

import ast
import io
import sys
import tokenize
from dataclasses import dataclass
from pathlib import Path

from tools import gallery

# (source lines, lines of code, functions) at most, by gallery folder; a file may have its own.
BUDGETS = {
    "recipes_source": (450, 190, 12),
    "intermediate_source": (750, 270, 15),
}
# Files with a budget of their own (none since the measurement core, issue 51).
OWN_BUDGETS = {}


@dataclass
class Size:
    source: str
    lines: int
    code: int
    functions: int

    def budget(self):
        folder = self.source.split("/", 1)[0]
        return OWN_BUDGETS.get(
            self.source, BUDGETS.get(folder, BUDGETS["intermediate_source"])
        )


def measure(path, name=None):
    text = Path(path).read_text(encoding="utf-8")
    tree = ast.parse(text)
    docstring_lines = set()
    functions = 0
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            functions += not isinstance(node, ast.Lambda)
        if isinstance(
            node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
        ):
            body = node.body
            if (
                body
                and isinstance(body[0], ast.Expr)
                and isinstance(body[0].value, ast.Constant)
            ):
                if isinstance(body[0].value.value, str):
                    docstring_lines.update(
                        range(body[0].lineno, body[0].end_lineno + 1)
                    )
    code_lines = set()
    skip = {
        tokenize.COMMENT,
        tokenize.NL,
        tokenize.NEWLINE,
        tokenize.INDENT,
        tokenize.DEDENT,
        tokenize.ENDMARKER,
        tokenize.ENCODING,
    }
    for tok in tokenize.tokenize(io.BytesIO(text.encode("utf-8")).readline):
        if tok.type not in skip:
            code_lines.update(range(tok.start[0], tok.end[0] + 1))
    return Size(
        source=name or str(path),
        lines=len(text.splitlines()),
        code=len(code_lines - docstring_lines),
        functions=functions,
    )


def sizes(root=gallery.ROOT):
    return [measure(Path(root) / t.source, t.source) for t in gallery.tutorials(root)]


def main():
    rows = sizes()
    print(f"{'tutorial':55} {'lines':>6} {'code':>6} {'funcs':>6}  budget")
    over = 0
    for s in rows:
        b = s.budget()
        bad = s.lines > b[0] or s.code > b[1] or s.functions > b[2]
        over += bad
        print(
            f"{s.source:55} {s.lines:6d} {s.code:6d} {s.functions:6d}  {b}{'  OVER' if bad else ''}"
        )
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
