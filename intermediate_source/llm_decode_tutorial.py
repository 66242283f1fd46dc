"""
.. _llm_decode_tutorial:

The decode loop of a language model, at the memory roofline
===========================================================

**Author:** torch.compile tutorials team

.. grid:: 2

    .. grid-item-card:: :octicon:`mortar-board;1em;` What you will learn
       :class-card: card-prerequisites

       * Why generating one token at a time is bound by memory: every step reads every
         weight once, so tokens per second is bytes per second over bytes per token
       * How a static key/value cache, ``torch.compile`` and CUDA graphs
         (``mode="reduce-overhead"``) take a decode step from CPU-bound to near the copy
         roofline, measured row by row, with no recompile during generation
       * How to compile the prompt's prefill apart from decoding, with dynamic lengths
       * Where batching stops helping and where a static cache's padding starts to cost

    .. grid-item-card:: :octicon:`list-unordered;1em;` Prerequisites
       :class-card: card-prerequisites

       * PyTorch 2.9 or later, with tabulate
       * :ref:`torch_compile_tutorial` (CUDA graphs) and :ref:`dynamic_shapes_tutorial`
       * A CUDA GPU with 24 GB or more for the timings (about 2.2 B parameters in bf16,
         and a float32 copy for the reference); runs on CPU with a small model in
         float32. Nothing is downloaded: the weights are random
       * On CPU, Inductor needs a C++ compiler
"""

# %%
# Why decoding is bound by memory
# -------------------------------
#
# A decoder generates text one token at a time. Each step feeds the newest token
# through every layer and reads every weight once, to do two floating-point operations
# per weight and sequence: at batch 1 a GPU can do hundreds of operations in the time it
# reads one byte, so the step waits on memory. The least time a step can take is the
# bytes it must read (the weights, and the keys and values of the tokens before it)
# over the GPU's copy speed. The page measures that copy speed and reports each variant
# as a share of it, as gpt-fast and serving engines do.
#
# The model below is a Llama-style decoder: RMSNorm, rotary position embeddings,
# grouped-query attention (fewer key/value heads than query heads) and a SwiGLU
# feed-forward block. The query, key and value projections are one matrix, and so are
# the feed-forward block's two input projections: fewer, larger kernels per step.

import importlib.util
import time

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F
from tabulate import tabulate
from torch import nn

import measure

device = "cuda" if torch.cuda.is_available() else "cpu"
if device == "cuda":  # the width of a 70 B model, 2 of its 80 layers: about 2.2 B
    cfg = dict(dim=8192, layers=2, heads=64, kv_heads=8, ffn=28672, vocab=32000)
    dtype, max_len, prompt_len = torch.bfloat16, 1024, 64
    sweep = [(1, 1024), (16, 1024), (64, 1024), (256, 1024), (16, 8192)]  # batch, cache
else:
    cfg = dict(dim=256, layers=2, heads=8, kv_heads=2, ffn=768, vocab=1024)
    dtype, max_len, prompt_len = torch.float32, 256, 16
    sweep = [(1, 256), (8, 256), (8, 1024)]
device_name = torch.cuda.get_device_name() if device == "cuda" else "CPU"
print(f"device: {device_name}; {cfg}")


class Attention(nn.Module):
    def __init__(self, dim, heads, kv_heads):
        super().__init__()
        self.heads, self.kv_heads, self.hd = heads, kv_heads, dim // heads
        self.wqkv = nn.Linear(dim, (heads + 2 * kv_heads) * self.hd, bias=False)
        self.wo = nn.Linear(dim, dim, bias=False)

    def forward(self, x, rope, pos, mask, cache):
        b, t, _ = x.shape
        kv = self.kv_heads * self.hd
        q, k, v = self.wqkv(x).split([self.heads * self.hd, kv, kv], dim=-1)
        q = rotate(q.view(b, t, self.heads, self.hd), rope).transpose(1, 2)
        k = rotate(k.view(b, t, self.kv_heads, self.hd), rope).transpose(1, 2)
        v = v.view(b, t, self.kv_heads, self.hd).transpose(1, 2)
        if isinstance(cache, list):  # growing: a new, longer tensor every step
            if cache:
                k, v = torch.cat([cache[0], k], dim=2), torch.cat([cache[1], v], dim=2)
            cache[:] = [k, v]
        elif cache is not None:  # static: written in place at the step's positions
            cache[0].index_copy_(2, pos, k)
            cache[1].index_copy_(2, pos, v)
            k, v = cache
        y = F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, is_causal=mask is None and t > 1, enable_gqa=True
        )
        return self.wo(y.transpose(1, 2).flatten(2))


def rotate(x, rope):  # x: (batch, time, heads, head dim); rope: (time, head dim / 2, 2)
    pairs = x.float().unflatten(-1, (-1, 2))
    cos, sin = rope[:, None, :, 0], rope[:, None, :, 1]
    a, b = pairs[..., 0], pairs[..., 1]
    return (
        torch.stack([a * cos - b * sin, a * sin + b * cos], -1).flatten(-2).type_as(x)
    )


class Block(nn.Module):
    def __init__(self, dim, heads, kv_heads, ffn):
        super().__init__()
        self.norm1, self.norm2 = nn.RMSNorm(dim, eps=1e-5), nn.RMSNorm(dim, eps=1e-5)
        self.attn = Attention(dim, heads, kv_heads)
        self.w13 = nn.Linear(dim, 2 * ffn, bias=False)  # gate and up projections
        self.w2 = nn.Linear(ffn, dim, bias=False)

    def forward(self, x, rope, pos, mask, cache):
        x = x + self.attn(self.norm1(x), rope, pos, mask, cache)
        gate, up = self.w13(self.norm2(x)).chunk(2, dim=-1)
        return x + self.w2(F.silu(gate) * up)


class Decoder(nn.Module):
    def __init__(self, dim, layers, heads, kv_heads, ffn, vocab):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.blocks = nn.ModuleList(
            Block(dim, heads, kv_heads, ffn) for _ in range(layers)
        )
        self.norm = nn.RMSNorm(dim, eps=1e-5)
        self.out = nn.Linear(dim, vocab, bias=False)
        hd, longest = dim // heads, max(length for _, length in sweep)
        angle = torch.arange(longest)[:, None] * 5e5 ** -(torch.arange(0, hd, 2) / hd)
        self.register_buffer("rope", torch.stack([angle.cos(), angle.sin()], -1))

    def forward(self, tokens, pos, cache):  # tokens: (batch, time); pos: (time,)
        """The last position's logits. cache: one entry per block, None (attend to the
        tokens given), a list (grown here) or a pair of preallocated tensors."""
        mask = None
        if isinstance(cache[0], tuple):  # static: hide the positions not written yet
            mask = torch.arange(cache[0][0].shape[2], device=pos.device) <= pos[:, None]
        x = self.embed(tokens)
        for block, entry in zip(self.blocks, cache):
            x = block(x, self.rope[pos], pos, mask, entry)
        return self.out(self.norm(x[:, -1:]))[:, 0].float()


def new_cache(kind, batch=1, length=max_len):
    """A cache per block. A static one is marked as a static address: its tensors stay
    in place across calls, so CUDA graphs read and write them where they are."""
    if kind != "static":
        return [[] if kind == "grow" else None for _ in range(cfg["layers"])]
    shape = (batch, cfg["kv_heads"], length, cfg["dim"] // cfg["heads"])
    cache = [tuple(torch.zeros(shape, dtype=dtype, device=device) for _ in "kv")]
    cache += [tuple(t.clone() for t in cache[0]) for _ in range(cfg["layers"] - 1)]
    for t in (t for pair in cache for t in pair):
        torch._dynamo.mark_static_address(t)
    return cache


with torch.device(device):
    torch.manual_seed(0)
    model = Decoder(**cfg).to(dtype).eval()
params = sum(p.numel() for p in model.parameters())
print(f"{params / 1e6:,.0f} M parameters, {dtype}, cache of {max_len} positions")

# %%
# Generating, and the reference every row is checked against
# -----------------------------------------------------------
#
# ``generate`` runs the prompt through the model once (the *prefill*), then decodes one
# token per step, each step feeding the previous step's greedy choice. A float32 copy
# of the same weights (float64 on a CPU) run without a cache gives the reference
# logits. Greedy tokens of random weights are often near ties, so the check compares
# every step's logits with the reference's, for a forced sequence of tokens.

torch.manual_seed(1)
prompt = torch.randint(cfg["vocab"], (1, prompt_len), device=device)
forced = torch.randint(cfg["vocab"], (8, 1, 1), device=device)  # fed when checking


@torch.no_grad()
def generate(prefill, step, prompt, n, cache, forced=None):
    """Prefill the prompt, then n decode steps; returns every step's logits."""
    pos = torch.arange(prompt.shape[1], device=device)
    logits = [prefill(prompt, pos, cache)]
    pos = pos[-1:] + 1
    for i in range(n):
        token = logits[-1].argmax(-1, keepdim=True) if forced is None else forced[i]
        torch.compiler.cudagraph_mark_step_begin()  # a new step: see below
        logits.append(step(token, pos, cache).clone())
        pos = pos + 1
    return torch.stack(logits, 1)


ref_dtype = torch.float32 if dtype == torch.bfloat16 else torch.float64
with torch.no_grad():
    reference = Decoder(**cfg).to(device, ref_dtype).eval()
    reference.load_state_dict(model.state_dict())
    seq, none = torch.cat([prompt, forced.view(1, -1)], 1), new_cache("none")
    lengths = range(prompt_len, seq.shape[1] + 1)
    outs = [
        reference(seq[:, :n], torch.arange(n, device=device), none) for n in lengths
    ]
    expected = torch.stack(outs, 1).float()
del reference
errors = {}


def check(name, kind, prefill, step):
    """Every step's logits against the reference, relative to the logits' size; returns
    the seconds of this first generation (a compile included)."""
    start = time.perf_counter()
    got = generate(prefill, step, prompt, len(forced), new_cache(kind), forced)
    errors[name] = ((got - expected).abs().max() / expected.abs().max()).item()
    assert errors[name] < (3e-2 if dtype == torch.bfloat16 else 1e-4), (name, errors)
    return time.perf_counter() - start


# %%
# Four ways to run a decode step
# ------------------------------
#
# * **eager, growing cache**: each step concatenates the new key and value onto the
#   cache, so every step allocates and copies the whole cache again;
# * **eager, static cache**: one preallocated cache of ``max_len`` positions per layer,
#   written in place with ``index_copy_``; attention reads all of it, with a mask that
#   hides the positions not yet written;
# * **compiled**: ``torch.compile(fullgraph=True)`` of the static-cache step. The
#   position is a tensor, so one graph serves every step;
# * **compiled + CUDA graphs**: the same with CUDA graphs on (what
#   ``mode="reduce-overhead"`` sets), which records the step's kernels once and replays
#   them with one launch. ``torch.compiler.cudagraph_mark_step_begin()`` tells it that a
#   new step begins, so it may reuse the previous step's output memory (the loop keeps
#   a copy);
# * **tuned**: the same with ``coordinate_descent_tuning``, for which Inductor times
#   each of its kernels with neighbouring block sizes and warp counts at compile time
#   and keeps the fastest.
#
# The prompt's prefill is compiled apart, with its length dynamic: one graph serves
# prompts of any length, while decoding keeps its own single-token graph.

# Dynamo keeps what it compiled, and what it learned about shapes, per Python function:
# prefill gets a function of its own, so the prompt's changing length never makes the
# single-token decode graph dynamic.


def decode_fn(tokens, pos, cache):
    return model(tokens, pos, cache)


prefill = torch.compile(lambda t, p, c: model(t, p, c), fullgraph=True, dynamic=True)
compiled = torch.compile(decode_fn, fullgraph=True)
variants = {"eager, growing cache": ("grow", model, model)}
variants["eager, static cache"] = ("static", model, model)
variants["compiled"] = ("static", prefill, compiled)
if device == "cuda":  # "triton.cudagraphs" is what mode="reduce-overhead" sets
    for tune in (False, True):
        opts = {"triton.cudagraphs": True, "coordinate_descent_tuning": tune}
        step = torch.compile(decode_fn, fullgraph=True, options=opts)
        name = "compiled + CUDA graphs" + ", tuned" * tune
        variants[name] = ("static", prefill, step)
measure.watch_cxx()
cold = measure.cold_compile(
    generate, prefill, compiled, prompt, 2, new_cache("static"), device=device
)
cxx = f", {cold.cxx:.1f} s of it in the C++ compiler" if cold.cxx else ""
print(f"cold compile: {cold.seconds:.1f} s, {cold.graphs} graphs{cxx}")
first = {name: check(name, *variant) for name, variant in variants.items()}

# %%
# No recompile while generating: after the warm-up, a long generation and prompts of new
# lengths compile nothing (Dynamo's frame counter does not move).

best_step = step if device == "cuda" else compiled  # the tuned one on a GPU
graphs = torch._dynamo.utils.counters["stats"]
before = graphs["unique_graphs"]
for new in (torch.randint(cfg["vocab"], (1, n), device=device) for n in (5, 17, 40)):
    generate(prefill, best_step, new, 32, new_cache("static"))
recompiles = graphs["unique_graphs"] - before
assert recompiles == 0, f"{recompiles} recompiles during generation"
print(f"prompts of 5, 17 and 40 tokens, 32 new tokens each: {recompiles} recompiles")

# %%
# Timing one decode step
# ----------------------
#
# Each variant decodes one token at position ``max_len / 2``, timed by the site's
# measurement core (:ref:`measuring_recipe` explains it) in windows of 50 ms: a
# generation loop runs step after step without waiting, and a short window would add
# the GPU's idle start of each window to every step. A step must read the weights (of
# the embedding table, one row) and the keys and values of the positions so far: those
# bytes at the speed of a large copy, timed in the same windows as the steps, are the
# step's roofline. The batch and cache shapes of the last section are timed in the same
# windows too. The "first generation"
# column is each variant's first checked generation with a warm compile cache, compile
# included where the variant had not compiled yet ("compiled" had: the cold compile
# above, from an empty cache, is its compile time).

size = model.out.weight.element_size()
weights = (params - model.embed.weight.numel()) * size
kv_per_pos = 2 * cfg["layers"] * cfg["kv_heads"] * cfg["dim"] // cfg["heads"] * size
at, token = max_len // 2, torch.zeros(1, 1, dtype=torch.long, device=device)
pos_at = torch.tensor([at], device=device)
grown = new_cache("grow")
generate(model, model, torch.zeros(1, at, dtype=torch.long, device=device), 0, grown)


def timed(kind, step, batch=1, length=max_len):
    if kind == "grow":  # the grown cache of `at` positions, restored before each call
        return lambda: step(token, pos_at, [list(kv) for kv in grown])
    cache, tokens = new_cache(kind, batch, length), token.repeat(batch, 1)
    step(tokens, pos_at, cache)  # a new batch size or length compiles here, not timed
    return lambda: (
        torch.compiler.cudagraph_mark_step_begin(),
        step(tokens, pos_at, cache),
    )


assert sweep[0] == (1, max_len)  # the sweep's first shape is a variant's own step
swept = ["compiled + CUDA graphs" if device == "cuda" else "eager, static cache"]
with torch.no_grad():
    steps = {name: timed(kind, step) for name, (kind, _, step) in variants.items()}
    for b, n in sweep[1:]:
        swept.append(f"batch {b}, cache {n}")
        steps[swept[-1]] = timed("static", variants[swept[0]][2], b, n)
    must_read = weights + kv_per_pos * (at + 1)
    res = measure.compare(steps, device, window_ms=50, roofline_bytes=must_read)
need, copy = res.roofline_ms, res.bytes_per_ms  # ms per step; bytes per ms
rows = [
    [n, 1e3 / res[n].ms, 100 * need / res[n].ms, first[n], errors[n]] for n in variants
]
rows = [row + res.cells(row[0]) for row in rows]
heads = ["variant", "tokens/s", "% of copy", "first generation (s)", "logit error"]
fmt = ["", ".0f", ".1f", ".1f", ".1e", *res.formats()]
print(tabulate(rows, heads + res.headers(), "github", fmt))
best = min(variants, key=lambda n: res[n].ms)
unwritten = kv_per_pos * (max_len - at - 1)  # bytes a static cache reads beyond them
print(
    f"A step must read {must_read / 1e9:.3f} GB; at the measured copy speed of "
    f"{copy / 1e6:.0f} GB/s the roofline is {need:.3f} ms per token "
    f"({1e3 / need:.0f} tokens/s). Fastest: {best}, {100 * need / res[best].ms:.0f} %. "
    f"The roofline counts the {at + 1} positions written; a static cache reads all "
    f"{max_len}, {unwritten / 1e6:.1f} MB more ({100 * unwritten / must_read:.2f} %)."
)
if device == "cpu":  # the copy's bytes read and written, MiB
    streamed = copy * res.copy.ms / 2**20
    print(
        f"On a CPU the weights ({weights / 2**20:.0f} MiB) can stay in the caches from "
        f"step to step, while the copy streams {streamed:.0f} MiB: here the roofline "
        "is a reference, and a step may beat it"
    )
fast = min(list(variants)[1:], key=lambda n: res[n].ms)  # the fastest but the first
print(res.versus(fast, "eager, growing cache", headline_as="fastest vs eager, growing"))
measure.headline("fastest step, % of copy roofline", 100 * need / res[best].ms, "%")
print(res.versus("eager, static cache", "eager, growing cache"))
print(res.versus("compiled", "eager, static cache"))
ax = plt.figure(figsize=(7, 2.6)).gca()
ax.barh(list(variants), [1e3 / res[n].ms for n in variants])
plt.xlabel(f"tokens/s at batch 1, {device_name}; the roofline: {1e3 / need:.0f}")
plt.show()
if device == "cuda":  # what tuning bought, against what it cost at compile time
    print(res.versus("compiled + CUDA graphs, tuned", "compiled + CUDA graphs"))

# %%
# A real loop, and where the rest of the step goes
# ------------------------------------------------
#
# The fastest variant then generates 200 greedy tokens in a plain loop (the choice of
# each token, its copy and the next position included); the time per token is the
# loop's less a prefill alone. Its parts, next, add up to its step, in four groups
# set against the roofline: the matrix products and the kernels Inductor fuses around
# them read the weights (with tuning, Inductor may generate the products too), attention
# reads the cache (all ``max_len`` positions of a static one), the GPU waits between
# kernels and steps, and everything else. Each group's excess over the time its bytes
# take at copy speed is its piece of the gap to the roofline; the pieces add up to it.

kind, pre, step = variants[best]
cache, took = new_cache(kind), []
for n in (0, 200, 0, 200):
    torch.cuda.synchronize() if device == "cuda" else None
    start = time.perf_counter()
    generate(pre, step, prompt, n, cache)
    torch.cuda.synchronize() if device == "cuda" else None
    took.append(time.perf_counter() - start)
loop = 1e3 * (took[3] - took[2]) / 200
print(
    f"{best}, 200 tokens in a loop: {loop:.3f} ms per token, {1e3 / loop:.0f} tokens/s, "
    f"{100 * need / loop:.0f} % of the roofline"
)
measure.headline("tokens/s in a 200-token loop", 1e3 / loop, "tokens/s")
r, gap, reads = res[best], res[best].ms - need, "matrix products, fused kernels"
must = {reads: weights / copy, "attention": kv_per_pos * (at + 1) / copy}
groups = dict.fromkeys([*must, "waiting", "everything else"], 0.0)


def group(part):  # Inductor may generate the matrix products itself (tuned, it does)
    kind = part.removeprefix("GPU: ")
    if kind in ("matmul", "compiled kernels", "compiled code"):
        return reads
    if kind == "attention":
        return kind
    return "waiting" if part.startswith("waiting") else "everything else"


for part, ms in r.parts.items():
    groups[group(part)] += ms
table = [[k, ms, must.get(k, 0), ms - must.get(k, 0)] for k, ms in groups.items()]
table = sorted(([*row, 100 * row[3] / gap] for row in table), key=lambda row: -row[3])
heads = ["part", "ms per token", "roofline ms", "excess ms", "% of the gap"]
print(tabulate(table, heads, "github", ["", ".4f", ".4f", ".4f", ".0f"]))
print(
    f"{best}: {r.ms:.3f} ms against a roofline of {need:.3f} ms; the largest excess, "
    f"{table[0][0]} {table[0][3]:.3f} ms, is {100 * table[0][3] / gap:.0f} % of the "
    f"{gap:.3f} ms gap"
)

# %%
# Batch size and cache length
# ---------------------------
#
# A batch of sequences shares one read of the weights: a step's bytes grow only by each
# sequence's cache, while its arithmetic grows with the batch. How much longer a larger
# batch's step takes, and so how far tokens per second follow the batch, is measured
# below. With a static cache every step reads all of its positions, written or not, so
# a long cache costs on every step. The shapes are those of the untuned CUDA graphs on
# a GPU (tuning would run again for every new shape) and of eager on a CPU (a compiled
# step would compile again for each); their first row is that variant's step above.

rows = []
for (b, n), name in zip(sweep, swept):
    r, read = res[name], weights + b * kv_per_pos * n  # all of a static cache
    rows.append([b, n, b * 1e3 / r.ms, read / 1e9, 100 * read / copy / r.ms])
    rows[-1] += res.cells(name)
heads = ["batch", "cache", "tokens/s", "GB read", "% of copy", *res.headers()]
print(tabulate(rows, heads, "github", ["", "", ".0f", ".3f", ".1f", *res.formats()]))
one, many, grew = res[swept[0]], res[swept[-2]], sweep[-2][0] / sweep[0][0]
print(
    f"From batch {sweep[0][0]} to {sweep[-2][0]} the step took {many.ms / one.ms:.2f}x "
    f"as long for {grew:.0f}x the tokens: {grew * one.ms / many.ms:.1f}x the tokens/s"
)
print(res.versus(swept[-1], f"batch {sweep[-1][0]}, cache {sweep[0][1]}"))
print(
    f"A static cache reads as many bytes as the weights at batch x cache length = "
    f"{weights / kv_per_pos:,.0f} positions: size it to the longest sequence served"
)
if importlib.util.find_spec("torchao") is None:
    print("torchao is not installed here, so the page has no int8 weight-only row")

# %%
# Conclusion
# ----------
#
# A decode step reads every weight to produce one token per sequence, so its speed is
# set by memory, and its roofline is the bytes it reads over the copy speed. Eager
# PyTorch issues every small operation from Python; a static cache gives the step fixed
# shapes, ``torch.compile`` fuses the small operations between the matrix products, and
# CUDA graphs replay the whole step with one launch. The busy share in each row says how
# much of its step the GPU worked; where it is low, launches are the lever. The tables
# measure how close each step came on the machine that built this page, which parts
# make up the rest, and how batching and the cache's length move the bytes per token.
#
# Further reading
# ---------------
#
# * `gpt-fast <https://github.com/pytorch-labs/gpt-fast>`__, a whole decoder and its
#   generation loop in a few hundred lines of PyTorch
# * `CUDA graph trees <https://docs.pytorch.org/docs/stable/torch.compiler_cudagraph_trees.html>`__
# * :ref:`dynamic_shapes_tutorial`, for compiling the prefill's changing lengths
