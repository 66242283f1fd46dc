"""The introduction's graph-break rewrite computes the function it replaces.

``noisy_clip`` clamps only when the maximum after its layer norm exceeds 3; ``quiet_clip``
removes the graph breaks with ``torch.where`` on a 0-d condition. Both are read from the
page's source with ``ast`` (the page itself is not run) and compared on an input of each
branch, eagerly and compiled in one graph. A rewrite that clamps on both branches, as the
page's earlier one did, fails the second input: ``test_the_inputs_tell_the_branches_apart``
proves it.
"""

import ast
import contextlib
import io

import pytest
import torch
import torch.nn.functional as F

from tools import gallery

PAGE = gallery.ROOT / "intermediate_source" / "torch_compile_tutorial.py"


def page_functions(*names):
    """The page's top-level functions `names`, executed on their own."""
    tree = ast.parse(PAGE.read_text(encoding="utf-8"), filename=str(PAGE))
    found = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in names]
    assert sorted(f.name for f in found) == sorted(names), f"{PAGE.name}: {names}"
    namespace = {"torch": torch, "F": F}
    exec(compile(ast.Module(body=found, type_ignores=[]), str(PAGE), "exec"), namespace)
    return [namespace[name] for name in names]


def branch_inputs():
    """Inputs whose layer norm has max > 3, and max <= 3 with min < -3."""
    base = torch.linspace(-1.0, 1.0, 16 * 32).view(16, 32)
    high, low = base.clone(), base.clone()
    high[0, 0], low[0, 0] = 50.0, -50.0
    return {"max > 3": high, "max <= 3, min < -3": low}


def silent(fn, x):
    with contextlib.redirect_stdout(io.StringIO()):  # noisy_clip prints
        return fn(x)


def test_inputs_take_both_branches():
    high, low = (F.layer_norm(x, x.shape[-1:]) for x in branch_inputs().values())
    assert high.max() > 3
    assert low.max() <= 3 and low.min() < -3


@pytest.mark.parametrize("branch", list(branch_inputs()))
def test_quiet_clip_equals_noisy_clip(branch):
    noisy_clip, quiet_clip = page_functions("noisy_clip", "quiet_clip")
    x = branch_inputs()[branch]
    expected = silent(noisy_clip, x)
    torch.testing.assert_close(quiet_clip(x), expected)
    torch._dynamo.reset()
    compiled = torch.compile(quiet_clip, backend="eager", fullgraph=True)
    torch.testing.assert_close(compiled(x), expected)


def test_the_inputs_tell_the_branches_apart():
    """A clamp on every input (no branch) differs from noisy_clip on the second input."""
    (noisy_clip,) = page_functions("noisy_clip")
    low = branch_inputs()["max <= 3, min < -3"]
    clamped = F.layer_norm(low, low.shape[-1:]).clamp(-3, 3) * 2
    assert not torch.allclose(clamped, silent(noisy_clip, low))
