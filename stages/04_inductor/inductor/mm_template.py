"""Which matrix multiplies become Triton templates: timed under ``mode="max-autotune"``,
by a rule in the default mode ([Note: a template untimed, compiled behind the library]).

Input: the scheduler's groups (``ExternNode`` library calls and ``FusedGroup`` kernels).
Output: the same groups, where an ``mm`` that a template runs faster than the library has
become a ``TemplateGroup``, the pointwise kernel right after it folded in as its epilogue
when it can be. ``codegen/triton_template.py`` prints the kernel.
Chapter: book/docs/performance.md ("Matrix multiplies of our own").

# --8<-- [start:note]
[Note: template or library]
cuBLAS is hard to beat on one matrix multiply, and every library call ends at memory: the
product is written, and the kernel after it (a Linear's bias add and GELU, a residual add)
reads it back. A template of our own can do that kernel's work on the accumulator instead
([Note: the matmul template]); it pays where it runs about as fast as the library. So
under ``mode="max-autotune"`` each ``mm`` over static sizes (16 or more along every dim,
float32, bfloat16 or float16, on a GPU) is timed both ways when the graph compiles, on
random inputs of the real sizes, strides and offsets: the library call, and the template
alone (its product stored) under each candidate config. The cheaper wins, counting the
host's time to launch each besides the GPU's ([Note: a launch's cost on the host]); the
template then gets the next kernel as its epilogue if that kernel fits, and keeps its
winning config. The choice is cached on disk like any autotuning result ([Note: autotuning]),
keyed by the template's source, the device and Triton's version, so a new process, or the
same shape in another graph, decides without timing.

An epilogue fits when it is the group right after the call (so moving it into the call
moves it past nothing), a pointwise kernel whose loop is the product's elements in row-
major order (``[M, N]``, or ``[B, T, N]`` over a ``[B*T, N]`` product), every read of the
product at the element the loop is at, and over static sizes. The product is then not
stored at all unless something else reads it. Without a GPU nothing can be timed: the
library call stays, unless ``MINIPT2_MM_TEMPLATE=1`` asks for the template with its first
candidate config (how the tests run it under the interpreter); ``=0`` turns templates off,
in every mode.
# --8<-- [end:note]

# --8<-- [start:host-note]
[Note: a launch's cost on the host]
A library matrix multiply costs the host more than a kernel of ours: the call goes through
ATen's dispatch and cuBLAS's choice of algorithm before its launch, 11 to 33 us measured on
the H200 host, where our template, launched directly ([Note: direct launches]), took 8 to
13 (``host_ms`` below, one process). Where the
GPU waits for the host, that difference is time: in graph_breaks' bfloat16 training step,
host-bound around its ``.item()``, each of eager's ``F.linear`` calls took 60 us of host
time inside the step, and with its eight products as templates (each 2 to 7 % slower than
cuBLAS on the GPU alone) the step went from eager's speed to about 1.3x. Timed on the GPU
alone the library won all eight. So both choices are also timed on the host
(``autotune.host_ms``: twenty launches back to back, the GPU left to run behind them), and
each costs its GPU time plus its host time, as if the two did not overlap: where the GPU
is the bottleneck the host's share is hidden and a near tie on the GPU goes to the cheaper
launch; a template clearly slower on the GPU (GPT-2's MLP product, 0.127 ms against
0.095) still loses. Under ``mode="max-autotune"`` the graph is replayed as a CUDA graph,
which launches nothing from the host, so there the GPU times alone decide. The host times
are kept in the cached choice beside the GPU's, and each mode reads what it counts.
# --8<-- [end:host-note]
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
from collections.abc import Sequence
from typing import Any

import sympy
import torch

from inductor import autotune
from inductor.codecache import subdir, write_atomic
from inductor.ir import Buffer, FallbackKernel
from inductor.scheduler import ExternNode, FusedGroup, reader_counts

log = logging.getLogger("minipt2.autotune")
aten = torch.ops.aten

DTYPES = (torch.float32, torch.bfloat16, torch.float16)
MIN_DIM = 16  # ``tl.dot`` takes blocks of at least 16 along each side
MAX_GRID_Y = 65535  # row tiles go on the grid's axis 1

# (YBLOCK, XBLOCK, KBLOCK, num_warps, num_stages): tiles that do well on Hopper in Triton's
# own matmul tutorial and in torch.compile's lists; float32 gets smaller K slabs
CONFIGS_16BIT = [(128, 128, 64, 8, 3), (128, 256, 64, 8, 3), (64, 128, 64, 4, 4),
                 (128, 64, 64, 4, 4), (64, 64, 64, 4, 3), (128, 128, 32, 4, 4)]
CONFIGS_32BIT = [(128, 128, 32, 8, 3), (64, 128, 32, 4, 4), (128, 64, 32, 4, 4),
                 (64, 64, 32, 4, 3), (128, 128, 16, 8, 3)]


@dataclasses.dataclass
class TemplateGroup(FusedGroup):
    """A matrix multiply printed as a template, with ``nodes`` (maybe none) as epilogue."""

    mm: FallbackKernel | None = None
    configs: list[dict[str, int]] = dataclasses.field(default_factory=list)  # best first

    @property
    def space(self) -> tuple[list, list]:
        return super().space if self.nodes else (list(self.mm.outputs[0].layout.size), [])

    @property
    def device(self):
        return self.mm.outputs[0].layout.device

    def is_reduction(self) -> bool:
        return False

    def read_names(self) -> set[str]:
        """What the kernel reads from memory: the operands and the epilogue's other inputs."""
        own = super().read_names() if self.nodes else set()
        return (own - {self.mm.outputs[0].name}) | set(self.mm.input_names())


def candidates(m: int, n: int, k: int, dtype: torch.dtype) -> list[dict[str, int]]:
    """The configs a template is timed under, each tile cut down to the problem's size."""
    table = CONFIGS_32BIT if dtype == torch.float32 else CONFIGS_16BIT
    configs: list[dict[str, int]] = []
    for ym, xn, kb, warps, stages in table:
        config = {"YBLOCK": min(ym, _pow2(m)), "XBLOCK": min(xn, _pow2(n)),
                  "KBLOCK": min(kb, _pow2(k)), "GROUP_M": 8, "num_warps": warps,
                  "num_stages": stages}
        if config not in configs:
            configs.append(config)
    return configs


CHEAP_MIN_DIM = 2048  # [Note: a template untimed, compiled behind the library]
CHEAP_MAX_FLOPS = 2**36
CHEAP_MIN_LAST_WAVE = 0.75


def launched_cheaply(m: int, n: int, k: int, dtype: torch.dtype, device: torch.device) -> bool:
    """Whether an ``mm`` of these sizes takes the template untimed, outside max-autotune
    ([Note: a template untimed, compiled behind the library])."""
    # BEGIN EXERCISE inductor-launched-cheaply: which products take the template untimed?
    if dtype not in (torch.bfloat16, torch.float16) or not autotune.can_time():
        return False
    if min(m, n, k) < CHEAP_MIN_DIM or 2 * m * n * k > CHEAP_MAX_FLOPS:
        return False
    config = candidates(m, n, k, dtype)[0]
    tiles = -(-m // config["YBLOCK"]) * -(-n // config["XBLOCK"])
    sms = multiprocessors(device)
    return tiles / (-(-tiles // sms) * sms) >= CHEAP_MIN_LAST_WAVE
    # END EXERCISE inductor-launched-cheaply


def multiprocessors(device: torch.device) -> int:
    return torch.cuda.get_device_properties(device).multi_processor_count


def _pow2(n: int) -> int:
    return max(MIN_DIM, 1 << (n - 1).bit_length())


def operand_sizes(kernel: FallbackKernel) -> tuple[int, int, int] | None:
    """(M, N, K) of an ``mm`` a template can run; None for any other call."""
    if kernel.op is not aten.mm.default or kernel.kwargs or len(kernel.outputs) != 1:
        return None
    (product,) = kernel.outputs
    a, b = kernel.args
    if product is None or not (isinstance(a, Buffer) and isinstance(b, Buffer)):
        return None
    layouts = (a.layout, b.layout, product.layout)
    exprs = [e for layout in layouts for e in (*layout.size, *layout.stride)]
    exprs.append(sympy.sympify(getattr(a, "offset", 0)) + sympy.sympify(getattr(b, "offset", 0)))
    if not all(sympy.sympify(e).is_Integer for e in exprs):
        return None  # a symbolic size: the library call serves every size
    (m, k), n = (int(s) for s in a.layout.size), int(b.layout.size[1])
    dtype = product.get_dtype()
    device = product.layout.device
    on_gpu = device.type == "cuda" or (device.type == "cpu" and _interpreting())
    if (not on_gpu or {a.get_dtype(), b.get_dtype()} != {dtype} or dtype not in DTYPES
            or min(m, n, k) < MIN_DIM or -(-m // MIN_DIM) > MAX_GRID_Y
            or [int(s) for s in product.layout.stride] != [n, 1]
            or any(x.layout.device != device for x in (a, b))):
        return None
    return m, n, k


def _interpreting() -> bool:
    from inductor.codegen.triton import ensure_interpreter_if_no_gpu, interpreting

    ensure_interpreter_if_no_gpu()
    return interpreting()


def epilogue_fits(group: Any, product: Buffer, m: int, n: int) -> bool:
    """Whether ``group`` can run on the template's tiles; see [Note: template or library]."""
    if type(group) is not FusedGroup or group.is_reduction():
        return False
    ranges = group.ranges
    if not all(sympy.sympify(r).is_Integer for r in ranges) or len(ranges) < 2:
        return False
    if int(ranges[-1]) != n or math.prod(int(r) for r in ranges[:-1]) != m:
        return False
    from inductor.codegen.triton_template import row_major

    here, reads_product = row_major(ranges), False
    for node, placement in zip(group.nodes, group.placements()):
        if placement is None or placement.kind != "x":
            return False
        accesses = node.accesses(group.space)
        if any(sympy.sympify(i).free_symbols - _loop_symbols(ranges)
               for i in accesses.indices):
            return False  # a size symbol, or an index read from memory
        for name, index in accesses.reads:
            if name == product.name:
                reads_product = True
                if sympy.expand(index - here) != 0:
                    return False
    return reads_product


def _loop_symbols(ranges: Sequence[Any]) -> set:
    from inductor.ir import index_vars

    return {s for s in index_vars(ranges, "i") if isinstance(s, sympy.Symbol)}


# --8<-- [start:use-templates]
def use_templates(groups: list, buffers: dict[str, Any], removed: set[str],
                  output_names: set[str], log_lines: list[str], host_counts: bool = True,
                  timed: bool = True) -> list:
    """``groups`` with each ``mm`` that a template should run replaced by a
    ``TemplateGroup``, the next group folded in when it fits; ``removed`` gains the
    products nothing else reads. ``host_counts``, ``timed``: see ``choose``."""
    readers = reader_counts(groups)
    out: list = []
    i = 0
    while i < len(groups):
        group = groups[i]
        sizes = operand_sizes(group.kernel) if isinstance(group, ExternNode) else None
        if sizes is None:
            out.append(group)
            i += 1
            continue
        product = group.kernel.outputs[0]
        after = groups[i + 1] if i + 1 < len(groups) else None
        if after is not None and not epilogue_fits(after, product, *sizes[:2]):
            after = None
        fused_removed = set(removed)
        if after is not None and product.name not in output_names \
                and readers.get(product.name) == 1:
            fused_removed.add(product.name)  # only the epilogue reads it: never stored
        template = TemplateGroup(list(after.nodes) if after else [], mm=group.kernel,
                                 configs=candidates(*sizes, product.get_dtype()))
        configs, why = choose(template, after, buffers, fused_removed, removed, host_counts,
                              timed)
        if not configs:
            if why:
                log_lines.append(f"{product.name} = mm: library call ({why})")
            out.append(group)
            i += 1
            continue
        template.configs = configs
        removed.update(fused_removed)
        out.append(template)
        fused = f", epilogue {', '.join(n.name for n in after.nodes)}" if after else ""
        log_lines.append(f"{product.name} = mm: Triton template ({why}){fused}")
        i += 2 if after is not None else 1
    return out
# --8<-- [end:use-templates]


def choose(template: TemplateGroup, epilogue: FusedGroup | None, buffers: dict[str, Any],
           fused_removed: set[str], removed: set[str], host_counts: bool = True,
           timed: bool = True) -> tuple[list[dict[str, int]], str]:
    """(the template's configs, best first, or [] for the library call; why). Timed:
    the template with ``epilogue`` fused against the library call and then ``epilogue``'s
    own kernel; see [Note: template or library]. ``host_counts``: the launches' host times
    are added to the GPU's (not where CUDA graphs replay the launches, [Note: a launch's
    cost on the host]). Not ``timed`` (the default mode): ``launched_cheaply`` decides,
    where the launches' host time counts."""
    configs = template.configs
    setting = os.environ.get("MINIPT2_MM_TEMPLATE", "")
    if setting == "0":
        return [], "MINIPT2_MM_TEMPLATE=0"
    if not timed:  # (nothing said where the library stays: the default mode's usual case)
        (product,) = template.mm.outputs
        if host_counts and launched_cheaply(*operand_sizes(template.mm), product.get_dtype(),
                                            template.device):
            return configs[:1], "untimed: a 16-bit product launched cheaply, compiled later"
        return [], ""
    if setting == "1":
        return configs, "MINIPT2_MM_TEMPLATE=1"
    if not autotune.can_time():
        return [], "nothing to time on"
    from inductor.codegen.triton_template import generate_mm_template

    fused = generate_mm_template(template, fused_removed, buffers, 0)
    key = autotune.cache_key(fused.source, [fused.ynumel, fused.numel])
    path = subdir("autotune") / f"mm-{key}.json"
    entry = _read(path, configs)
    how = "cached"
    if entry is None:
        unfused = None
        if epilogue is not None:
            from inductor.codegen.triton import generate_triton_kernel

            unfused = generate_triton_kernel(epilogue, removed, buffers, 0)
        try:
            entry = time_choices(template.mm, fused, unfused, buffers)
        except Exception as e:  # noqa: BLE001 - out of memory, say: the library call it is
            log.info("mm %s: timing failed (%s); the library call",
                     [fused.ynumel, fused.numel], e)
            return [], f"timing failed: {type(e).__name__}"
        write_atomic(path, json.dumps(entry, indent=1) + "\n")
        how = "timed"
    library, best, best_ms = entry["library_ms"], entry["config"], entry["template_ms"]
    library_host, template_host = entry["library_host_ms"], entry["template_host_ms"]
    if not host_counts:  # kept in the cached choice all the same
        library_host = template_host = 0.0
    log.info("mm %s: library %.4f ms (host %.4f), template %.4f ms (host %.4f) (%s)",
             [fused.ynumel, fused.numel], library, library_host, best_ms, template_host, how)
    costs = (f"library {library:.4f} + {library_host:.4f} ms on the host, template "
             f"{best_ms:.4f} + {template_host:.4f} ms")  # [Note: a launch's cost on the host]
    if best is None or not best_ms + template_host < library + library_host:
        return [], f"{how}: {costs}"
    return [best], f"{how}: {costs}"


def launched_from_host(mode: str, example_inputs: Sequence[Any]) -> bool:
    """Whether the graph's kernels are launched from the host at every call, so that their
    launches' host time counts ([Note: a launch's cost on the host]); not where a CUDA
    graph replays them."""
    from inductor.cudagraphs import wants_cudagraphs

    return not wants_cudagraphs(mode, example_inputs)


def _read(path: Any, configs: list[dict[str, int]]) -> dict | None:
    """A cached choice; one that does not parse or names a foreign config is deleted."""
    if not path.exists():
        return None
    try:
        entry = json.loads(path.read_text())
        times = ("library_ms", "template_ms", "library_host_ms", "template_host_ms")
        if (entry["config"] is None or entry["config"] in configs) and \
                all(isinstance(entry[key], float) for key in times):
            return entry
    except (OSError, ValueError, KeyError, TypeError):
        pass
    path.unlink(missing_ok=True)
    return None


def time_choices(kernel: FallbackKernel, fused: Any, unfused: Any,
                 buffers: dict[str, Any]) -> dict:
    """Time the library call followed by ``unfused`` (the epilogue's own kernel, or None)
    against ``fused`` (the template with the epilogue) under each of its configs, on
    random inputs laid out as the graph's."""
    from inductor.codecache import TritonCodeCache
    from inductor.launcher import precompile

    a, b = kernel.args
    (product,) = kernel.outputs
    memory: dict[str, torch.Tensor] = {}
    for x in (a, b, *(buffers[name] for name in fused.args + (unfused.args if unfused
                                                                  else []))):
        flat = _random_memory(x)  # (x.t() @ x: one buffer, big enough for both views)
        if x.name not in memory or memory[x.name].numel() < flat.numel():
            memory[x.name] = flat
    views = [_view(memory[x.name], x) for x in (a, b)]
    result = _view(memory.setdefault(product.name, _random_memory(product)), product)
    library = [lambda: torch.mm(*views, out=result)]
    if unfused is not None:
        epilogue = _launcher(unfused, memory)
        library.append(lambda: epilogue(unfused.launch))
    library_ms = autotune.benchmark(lambda: [call() for call in library], {"library": 1})
    if unfused is not None:  # on the host, as the wrapper launches it
        library[1] = _direct(unfused, memory, unfused.launch)
    library_host_ms = autotune.host_ms(lambda: [call() for call in library])
    fn = TritonCodeCache.load(fused.source, fused.name)
    if not _interpreting():  # compile every config at once, on threads
        args = [memory[name].dtype for name in fused.args] + fused.size_args()
        precompile([(fn, tuple(args), dict(c)) for c in fused.configs])
    template = _launcher(fused, memory, fn)
    timings = []
    for config in fused.configs:
        try:
            ms = autotune.benchmark(lambda c=config: template(c), config)
        except Exception as e:  # noqa: BLE001 - a config this GPU cannot run: not a candidate
            log.info("mm template config %s failed (%s); skipped", config, e)
            ms = float("inf")
        timings.append((config, float(ms)))
    best, best_ms = min(timings, key=lambda t: t[1])
    found = best_ms < float("inf")
    template_host_ms = (autotune.host_ms(_direct(fused, memory, best, fn)) if found
                        else float("nan"))
    return {"sizes": [int(fused.ynumel), int(fused.numel)], "device": autotune.device_name(),
            "library_ms": float(library_ms), "config": best if found else None,
            "template_ms": best_ms if found else float("nan"),
            "library_host_ms": float(library_host_ms), "template_host_ms": template_host_ms,
            "timings_ms": [[c, ms] for c, ms in timings]}


def _launcher(source: Any, memory: dict[str, torch.Tensor], fn: Any = None) -> Any:
    """``config -> launch`` of a printed kernel on the tensors in ``memory``."""
    from inductor.codecache import TritonCodeCache

    fn = fn or TritonCodeCache.load(source.source, source.name)
    tuner = autotune.Autotuner(fn, source)
    args = [memory[name] for name in source.args] + [int(s) for s in source.size_args()]
    return lambda config: tuner.launch(config, args)


def _direct(source: Any, memory: dict[str, torch.Tensor], config: dict[str, int],
            fn: Any = None) -> Any:
    """A launch of a printed kernel on the tensors in ``memory`` under ``config``, as the
    wrapper makes it: through a ``Launcher`` ([Note: direct launches]), launched once here so
    that later launches are direct."""
    from inductor.codecache import TritonCodeCache
    from inductor.launcher import Launcher

    launcher = Launcher(fn or TritonCodeCache.load(source.source, source.name))
    args = [memory[name] for name in source.args] + [int(s) for s in source.size_args()]
    sizes = args[len(source.args):]
    xnumel, ynumel = (sizes[1], sizes[0]) if "YBLOCK" in config else (sizes[0], 1)
    grid = (-(-xnumel // config["XBLOCK"]), -(-ynumel // config.get("YBLOCK", 1)), 1)

    def launch() -> None:
        launcher[grid](*args, **config)
    launch()
    return launch


def _view(memory: torch.Tensor, buffer: Buffer) -> torch.Tensor:
    layout = buffer.layout
    return memory.as_strided([int(s) for s in layout.size], [int(s) for s in layout.stride],
                             int(getattr(buffer, "offset", 0)))


def _random_memory(arg: Buffer) -> torch.Tensor:
    """A flat tensor big enough for ``arg``'s view of its buffer: random floats, zeros of
    any other dtype."""
    layout = arg.layout
    extent = int(getattr(arg, "offset", 0)) + 1 + sum(
        (int(n) - 1) * abs(int(s)) for n, s in zip(layout.size, layout.stride))
    if not layout.dtype.is_floating_point:
        return torch.zeros(extent, device=layout.device, dtype=layout.dtype)
    return torch.randn(extent, device=layout.device, dtype=torch.float32).to(layout.dtype)
