"""Compiled fusion groups: lower -> schedule -> render -> compile -> cache -> launch.

``compile_group(node)`` returns the callable the host program calls for a fusion group. It
looks the group up in the in-memory kernel cache (key: canonical fusion text + input
specialization + target + codegen knobs + the launch dumps; see ``runtime/cache.py``), otherwise lowers,
schedules, renders and compiles it (through the on-disk cache), and generates a small Python
launcher that computes the run-time sizes and strides, allocates the outputs through torch's
caching allocator and launches. Any failure follows the fallback policy: one warning naming the
group and a repro written under ``config.repro_dir`` (default: ``<cache dir>/repro``), then eager
execution; with ``PYTORCH_NVFUSER_DISABLE=fallback`` it raises ``FusionFailure`` with the same information.
"""
from __future__ import annotations

import hashlib
import os
import threading
import time
import traceback
from typing import Any, Callable, Optional, Sequence

import torch

from ..codegen.cstyle import RenderOptions, render_function, render_source, serial_twin, stride_args
from ..codegen.dialects import CPP, CUDA
from ..ir.kir import Kernel, kernel_ir_text
from ..codegen.lower import LaunchPlan, LoweringError, lower_group
from ..codegen.pointwise import PointwiseParams, pointwise_heuristics, schedule_pointwise
from ..codegen.schedule import LoopNest, ScheduleError
from ..config import config
from ..ops.axes import needs_axes
from ..ir.types import full_stride_order
from ..ir.graph import Graph, Node
from ..ir.types import TensorType
from ..log import dump, jit_log, warn
from ..runtime.pycode import define
from .fusion import FusionFailure
from .fusion_eager import eager_runner

_MEMORY: dict[tuple, Callable] = {}
# compile_group runs on several threads at once (executor._prebuild): one lock per kernel key,
# so that identical groups (a transformer's twelve layers) build once and the rest wait for it
_KEY_LOCKS: dict[tuple, threading.Lock] = {}
_LOCKS_LOCK = threading.Lock()
_STATS_LOCK = threading.Lock()
STATS = {"memory_hits": 0, "builds": 0, "build_seconds": 0.0}


def canonical_key(sub: Graph, target: str) -> tuple:
    """Fusion text with canonical names and size-free input types, plus target and knobs."""
    names = {v: f"%{i}" for i, v in enumerate(sub.inputs)}
    lines = []
    for v in sub.inputs:
        t = v.type
        lines.append(str(t.specialization()) if isinstance(t, TensorType) else t.name)
    for n in sub.block.nodes:
        for o in n.outputs:
            names[o] = f"%{len(names)}"
        ins = ",".join(names[v] for v in n.inputs)
        extra = repr(n.attrs.get("value")) if n.kind == "prim::Constant" else ""
        out_t = [(o.type.dtype, o.type.broadcast_dims, o.type.stride_order) if isinstance(o.type, TensorType)
                 else o.type.name for o in n.outputs]
        lines.append(f"{n.kind}({ins}){extra}->{out_t}")
    lines.append("return " + ",".join(names[v] for v in sub.outputs))
    if getattr(sub, "writes_into", None):      # outputs written into inputs (passes/in_place.py)
        lines.append(f"writes_into {sorted(sub.writes_into.items())}")
    # launchers built under the launch dumps print every launch; the others have no dump code at
    # all (nothing checked per call), so the two are different launchers
    dumps = tuple(d for d in ("launch_param", "kernel_args") if config.dumps(d))
    return ("\n".join(lines), target, config.codegen_key(), int(config.cpu["omp_threshold"]),
            tuple(sorted(config.cuda.items())), dumps)


def _arg_kind(dtype: torch.dtype) -> str:
    return {torch.float64: "f64", torch.int64: "i64", torch.bool: "i32"}[dtype]


def _render_opts(index_type: str) -> RenderOptions:
    return RenderOptions(index_type=index_type, index_hoist=not config.is_disabled("index_hoist"),
                         predicate_elimination=not config.is_disabled("predicate_elimination"),
                         omp_threshold=int(config.cpu["omp_threshold"]))


class PointwiseScheduler:
    """The automatic scheduler, as ``CompiledGroup`` calls it. A hand schedule (the frontend's
    ``UserScheduler``) has the same methods, a ``key`` and ``coalesce = False``."""

    coalesce = True
    key = ""

    def heuristics(self, kernel: Kernel, plan: LaunchPlan, target: str, knobs: dict,
                   vectorize: bool = True) -> PointwiseParams:
        return pointwise_heuristics(kernel, target, knobs, vectorize=vectorize)

    def schedule(self, kernel: Kernel, plan: LaunchPlan, params: PointwiseParams) -> LoopNest:
        return schedule_pointwise(kernel, params)


AUTOMATIC = PointwiseScheduler()


class CompiledGroup:
    """Everything built for one fusion group: kernel IR, schedules, source, launcher."""

    def __init__(self, sub: Graph, target: str, device: torch.device, name: str,
                 scheduler: Optional[PointwiseScheduler] = None) -> None:
        self.sub, self.target, self.device, self.name = sub, target, device, name
        self.scheduler = scheduler or AUTOMATIC
        self.kernel, self.plan = lower_group(sub, name, coalesce=self.scheduler.coalesce)
        self.source = ""
        self.variants: list[tuple[str, LoopNest, PointwiseParams, str]] = []   # (fname, nest, params, index type)
        self.divisors: list[list[str]] = []     # per variant: extents divided by with magic numbers
        self.variant_sources: list[str] = []    # CUDA: one source per variant
        self.build()

    def build(self) -> None:
        k = self.kernel
        if self.target == "cpu":
            params = self.scheduler.heuristics(k, self.plan, "cpu", config.cuda)
            nest = self.scheduler.schedule(k, self.plan, params)
            fn = serial_twin(render_function(k, nest, CPP, self.name, _render_opts("long long")))
            self.variants = [(self.name, nest, params, "long long")]
            self.source = render_source([fn], CPP)
        else:
            fns = []
            vec_params = self.scheduler.heuristics(k, self.plan, "cuda", config.cuda)
            scalar_params = self.scheduler.heuristics(k, self.plan, "cuda", config.cuda, vectorize=False)
            for itype, tag in (("int", "i32"), ("long long", "i64")):
                for params, vtag in ((scalar_params, "s"), (vec_params, "v")):
                    if vtag == "v" and params.vector == 1:
                        continue
                    nest = self.scheduler.schedule(k, self.plan, params)
                    fname = f"{self.name}_{vtag}_{tag}"
                    info: dict = {}
                    opts = _render_opts(itype)
                    opts.fast_div = itype == "int"
                    fns.append(render_function(k, nest, CUDA, fname, opts, info))
                    self.variants.append((fname, nest, params, itype))
                    self.divisors.append(info.get("divisors", []))
            self.source = render_source(fns, CUDA)        # every variant: dumps, repros, NVRTC checks
            # one NVRTC program per variant: each compiles on first use (launcher's ``_load``)
            self.variant_sources = [render_source([fn], CUDA) for fn in fns]
        fname, nest, params, _ = self.variants[-1]
        dump("fusion_ir", f"Fusion IR of {self.name}", str(self.sub))
        dump("scheduler_params", f"Pointwise schedule of {self.name}",
             f"{params}\n" + "\n".join(f"tv.{h}" for h in nest.history))
        dump("kernel_ir", f"Kernel IR of {self.name}", self.kernel_ir_text())
        dump("cuda_kernel" if self.target == "cuda" else "cpp_kernel", f"Kernel {self.name}", self.source,
             "cuda" if self.target == "cuda" else "cpp")

    def kernel_ir_text(self) -> str:
        return kernel_ir_text(self.kernel, self.variants[-1][1], f"kernel {self.kernel.name}:")


# -- launcher generation -------------------------------------------------------------------------
def _launcher_source(cg: CompiledGroup) -> str:
    """Straight-line Python: sizes, allocation, arguments, launch. No loops over tensors."""
    k, plan = cg.kernel, cg.plan
    n_in = len(cg.sub.inputs)
    L = [f"def run({', '.join(f'x{i}' for i in range(n_in))}):"]
    srcs = sorted({i for i, _ in plan.dim_source.values()})
    for i in srcs:
        L.append(f"    s{i} = x{i}.shape")
    size = {od: f"s{i}[{d}]" for od, (i, d) in plan.dim_source.items()}
    for r, dims in enumerate(plan.root_dims):
        L.append(f"    n{r} = " + (" * ".join(size[od] for od in dims) or "1"))
    if not plan.root_dims:
        L.append("    n0 = 1")
    outs = []
    for j, (dtype, sizes, order, device) in enumerate(plan.outputs):
        if j in plan.aliases:
            outs.append(f"x{plan.aliases[j]}" + (".detach()" if j in plan.detached else ""))
            continue
        rank = len(sizes)
        off = plan.out_rank - rank
        sz = ["1" if s == 1 else size[off + d] for d, s in enumerate(sizes)]
        L.append(f"    o{j} = {allocation(j, sz, order)}")
        outs.append(f"o{j}")
    args = []
    for p, (t, tp) in enumerate(zip(k.tensors, plan.tensors)):
        args.append(f"o{tp.position}.data_ptr()" if t.is_output else _input_pointer(tp))
    args += [f"n{r}" for r in range(k.n_dims)]
    args += _stride_reads(k, plan, L)
    args += [f"x{i}.item()" if i in plan.host_scalars else f"x{i}" for i in plan.scalar_inputs]
    total = " * ".join(f"n{r}" for r in range(max(k.n_dims, 1)))
    L.append(f"    total = {total}")
    ret = f"({', '.join(outs)},)"
    if k.stores:
        L.append("    if total:")
        if cg.target == "cpu":
            L.append(f"        _fn(_pk({', '.join(args)}))")
        else:
            n_t = len(k.tensors)
            # (an input no expression loads, read for its sizes only, has no accesses to align)
            accessed = k.accessed()
            vec_tensors = [p for p, t in enumerate(k.tensors) if t.dim_kinds and t.dim_kinds[-1] != "bcast"
                           and p in accessed]
            V = max(v[2].vector for v in cg.variants)
            for p, a in enumerate(args[:n_t]):
                L.append(f"        p{p} = {a}")
            strides = args[n_t + k.n_dims:n_t + k.n_dims + len(stride_args(k))]
            for s_, a in enumerate(strides):
                L.append(f"        q{s_} = {a}")
            call_args = [f"p{p}" for p in range(n_t)] + args[n_t:n_t + k.n_dims] + \
                [f"q{s_}" for s_ in range(len(strides))] + args[n_t + k.n_dims + len(strides):]
            flipped = _flipped_strides(k, plan)
            small = "total < 2147483647" + "".join(f" and {'-' if (p, r) in flipped else ''}q{s_} * n{r} < 2147483647"
                                                    for s_, (p, r) in enumerate(stride_args(k)))
            L.append(f"        small = {small}")
            launch = ("_l{i}((grid if grid < _maxgrid else _maxgrid, 1, 1), _block, _stream(_devidx), "
                      + ", ".join(call_args) + "{extra})")
            dnames: dict[str, str] = {}
            for divs in cg.divisors:
                for d in divs:
                    dnames.setdefault(d, f"d{len(dnames)}")

            def emit(i: int, indent: str, grid: str) -> None:
                L.append(f"{indent}grid = {grid}")
                extra = "".join(f", {dnames[d]}m, {dnames[d]}s" for d in cg.divisors[i])
                L.append(indent + launch.format(i=i, extra=extra))

            blk = cg.variants[0][2].block * cg.variants[0][2].unroll
            vblk = V * cg.variants[-1][2].block * cg.variants[-1][2].unroll
            flat, vgrid = f"(total + {blk - 1}) // {blk}", f"(total + {vblk - 1}) // {vblk}"
            if dnames:
                L.append("        if small:")
            for d, nm in dnames.items():     # the cached pair: one dict lookup, no frame
                L.append(f"            {nm}m, {nm}s = _MG({d}) or _magic({d})")
            if V > 1:
                aligned = " | ".join(f"p{p}" for p in vec_tensors) or "0"
                # a tensor broadcast along the innermost root is read (or written) once per
                # vector, at lane 0's offset, which every lane shares: its strides need no multiple
                # of the width (a rotary backward's flipped [2, 1] mask steps back by 1)
                strides_ok = "".join(f" and q{s_} % {V} == 0" for s_, (p, _r) in enumerate(stride_args(k))
                                     if p in vec_tensors)
                L.append(f"        vec = n{max(k.n_dims, 1) - 1} % {V} == 0 and not (({aligned}) & 15){strides_ok}")
                for branch, (vi, si) in (("small", (1, 0)), ("not small", (3, 2))):
                    L.append(f"        if {branch} and vec:")
                    emit(vi, "            ", vgrid)
                    L.append(f"        elif {branch}:")
                    emit(si, "            ", flat)
            else:
                L.append("        if small:")
                emit(0, "            ", flat)
                L.append("        else:")
                emit(1, "            ", flat)
    # An output with fewer dims or size-1 dims is written by every iteration along the dims it
    # broadcasts over; when one of those is empty, nothing writes it although it has elements
    # (sqrt(x[1, 5]) next to x + y[0, 5]): that call runs eager.
    partial = [f"o{j}" for j, (_, sizes, _, _) in enumerate(plan.outputs)
               if j not in plan.aliases and (len(sizes) < plan.out_rank or 1 in sizes)]
    if k.stores and partial:
        L.append(f"    if not total and ({' or '.join(f'{o}.numel()' for o in partial)}):")
        L.append(f"        return _empty_domain({', '.join(f'x{i}' for i in range(n_in))})")
    L.append(f"    return {ret}")
    body = L[1:]
    params = ", ".join(f"x{i}" for i in range(n_in))
    return "\n".join([L[0], "    if _broken:", f"        return _eager({params})", "    try:"]
                     + ["    " + ln for ln in body]
                     + ["    except Exception as e:", f"        return _fail(e, ({params}{',' if n_in == 1 else ''}))"]) + "\n"


def allocation(j: int, sz: list[str], order: Sequence[int]) -> str:
    """The expression allocating output ``j`` of sizes ``sz`` (Python expressions) dense in
    stride order ``order``: ``torch.empty`` where that order is the default one (contiguous; a
    third less host time than ``torch.empty_strided`` on an H100 host: 6.1 against 8.6 us), else
    ``empty_strided`` with the strides torch gives such a tensor (a size-0 dim counts as 1 for
    the dims outside it). ``torch.empty`` gets the sizes as separate arguments: its argument
    parser takes them faster than one tuple (0.9 against 1.2-1.8 us per call on a CPU host).
    The launcher's namespace binds ``_empty``, ``_empty_c``, ``_odt{j}`` and ``_dev``."""
    rank = len(sz)
    full = full_stride_order(order, rank)
    comma = "," if rank == 1 else ""
    if full == list(range(rank)):
        return f"_empty_c({', '.join(sz) if rank else '()'}, dtype=_odt{j}, device=_dev)"
    st = [""] * rank
    acc = "1"
    for d in reversed(full):
        st[d] = acc
        nz = sz[d] if sz[d] == "1" else f"({sz[d]} or 1)"
        acc = f"{acc} * {nz}" if acc != "1" else nz
    return f"_empty(({', '.join(sz)}{comma}), ({', '.join(st)}{comma}), dtype=_odt{j}, device=_dev)"


def _input_pointer(tp: TensorPlan) -> str:
    """A group input's pointer argument: its data pointer, or for a flipped read
    (``TensorPlan.flipped``) the address of its last element along the flipped dims, from which
    the negated strides of those dims step back (``_stride_reads``)."""
    x = f"x{tp.position}"
    if not tp.flipped:
        return f"{x}.data_ptr()"
    back = " + ".join(f"({x}.shape[{d}] - 1) * {x}.stride({d})" for d in tp.flipped)
    return f"{x}.data_ptr() + ({back}) * {tp.dtype.itemsize}"


def _flipped_strides(k: Kernel, plan: LaunchPlan) -> set[tuple[int, int]]:
    """The (tensor param, root) stride arguments passed negated: a flipped dim's (its own root)."""
    return {(p, r) for p, r in stride_args(k) if set(plan.tensors[p].dims[r]) & set(plan.tensors[p].flipped)}


def _stride_reads(k: Kernel, plan: LaunchPlan, L: list[str]) -> list[str]:
    """The stride arguments' expressions. A tensor read at two or more strides is asked once
    (``t{n} = x.stride()``, a line appended to ``L``) and indexed; one read stays ``x.stride(d)``.
    A flipped dim's stride is negated."""
    owners = []
    flipped = _flipped_strides(k, plan)
    for p, r in stride_args(k):
        tp = plan.tensors[p]
        owners.append((f"o{tp.position}" if k.tensors[p].is_output else f"x{tp.position}", tp.dims[r][-1],
                       "-" if (p, r) in flipped else ""))
    counts: dict[str, int] = {}
    for owner, _, _ in owners:
        counts[owner] = counts.get(owner, 0) + 1
    names: dict[str, str] = {}
    out = []
    for owner, d, sign in owners:
        if counts[owner] == 1:
            out.append(f"{sign}{owner}.stride({d})")
            continue
        if owner not in names:
            names[owner] = f"t{len(names)}"
            L.append(f"    {names[owner]} = {owner}.stride()")
        out.append(f"{sign}{names[owner]}[{d}]")
    return out


def _dumping_cpu(fn: Callable, cg: "CompiledGroup", kinds: list[str]) -> Callable:
    """The CPU kernel call with the ``launch_param`` / ``kernel_args`` dumps in front."""
    n_idx = cg.kernel.n_dims

    def call(*args):
        n_ptr = len(cg.kernel.tensors)
        if config.dumps("launch_param"):
            extents = args[n_ptr:n_ptr + n_idx]
            total = 1
            for e in extents:
                total *= e
            threads = "OpenMP" if total > int(config.cpu["omp_threshold"]) else "1 thread"
            print(f"[launch_param] {cg.name}: extents={list(extents)} ({threads})")
        if config.dumps("kernel_args"):
            shown = ", ".join(f"{k}={v:#x}" if k == "ptr" else f"{k}={v}" for k, v in zip(kinds, args))
            print(f"[kernel_args] {cg.name}({shown})")
        fn(*args)

    return call


def _as_tuple(*args: Any) -> tuple:
    return args


def cpu_kernels(cg: Any, names: Sequence[str], kinds: list[str]) -> tuple[list[Callable], Callable]:
    """Compile ``cg.source`` and return (the kernel per name of ``names``, ``pack``): a launcher
    calls ``kernel(pack(*args))``. The kernels are the bare ctypes functions of the packed
    entries (``runtime.cpu.packed_entries``: one argument instead of a conversion per argument,
    no wrapper frame); under the ``launch_param`` / ``kernel_args`` dumps, wrappers printing each
    launch in front of the plain entries, ``pack`` then making a tuple."""
    from ..runtime.cpu import CpuKernel, compile_cpp, packed_entries

    so = compile_cpp(cg.source + packed_entries(names, kinds))
    if config.dumps("launch_param") or config.dumps("kernel_args"):
        plain = [_dumping_cpu(CpuKernel(so, n, kinds).fn, cg, kinds) for n in names]
        return [lambda a, f=f: f(*a) for f in plain], _as_tuple
    kernels = [CpuKernel(so, n, kinds, packed=True) for n in names]
    return [k.fn for k in kernels], kernels[0].pack


_MAGIC: dict[int, tuple[int, int]] = {}


def magic_divisor(d: int) -> tuple[int, int]:
    """(multiplier, shift) so that n // d == (umulhi(n, m) + n) >> s for 0 <= n, d < 2**31."""
    hit = _MAGIC.get(d)
    if hit is None:
        s = (d - 1).bit_length() if d > 1 else 0
        hit = _MAGIC[d] = (((1 << 32) * ((1 << s) - d)) // d + 1) & 0xFFFFFFFF, s
    return hit


def _build_launcher(cg: CompiledGroup) -> Callable:
    k, plan = cg.kernel, cg.plan
    ns: dict[str, Any] = {"_empty": torch.empty_strided, "_empty_c": torch.empty, "_dev": cg.device}
    for j, (dtype, *_rest) in enumerate(plan.outputs):
        ns[f"_odt{j}"] = dtype
    n_index = k.n_dims + len(stride_args(k))
    scalar_kinds = [_arg_kind(s.dtype) for s in k.scalars]
    kinds = ["ptr"] * len(k.tensors) + ["i64"] * n_index + scalar_kinds
    if cg.target == "cpu":
        (ns["_fn"],), ns["_pk"] = cpu_kernels(cg, [cg.name], kinds)
    else:
        from ..runtime import cuda_driver, nvrtc

        idx = cg.device.index if cg.device.index is not None else torch.cuda.current_device()
        arch = cuda_driver.device_arch(idx)
        fns: list = [None] * len(cg.variants)

        def load(i: int) -> Any:
            """Compile and load variant ``i``; from then on ``_l{i}`` is its launch itself."""
            fname, nest, params, itype = cg.variants[i]
            vk = ["ptr"] * len(k.tensors) + ["i32" if itype == "int" else "i64"] * n_index + scalar_kinds + \
                ["u32", "u32"] * len(cg.divisors[i])
            f = fns[i] = cuda_driver.CudaKernel(nvrtc.compile_cubin(cg.variant_sources[i], fname, arch),
                                                fname, idx, vk)
            ns[f"_l{i}"] = f.launch
            return f

        for i in range(len(cg.variants)):
            ns[f"_l{i}"] = _first_launch(load, i)
        # The 32-bit variant nearly every call takes (vectorized where there is one) is built now;
        # the others (unaligned, 64-bit indexing) compile on first use: a quarter of the NVRTC time.
        load(1 if len(cg.variants) == 4 else 0)
        ns["_fns"] = fns
        ns["_stream"] = cuda_driver.RAW_STREAM
        ns["_devidx"] = idx
        ns["_block"] = (cg.variants[0][2].block, 1, 1)
        ns["_maxgrid"] = cuda_driver.sm_count(idx) * int(config.cuda["blocks_per_sm"]) \
            if cg.variants[0][2].grid_cap else 2 ** 31 - 1
        ns["_magic"], ns["_MG"] = magic_divisor, _MAGIC.get
    src = _launcher_source(cg)
    cg.launcher_source = src
    ns.update({"_broken": False, "_eager": None, "_fail": None, "_empty_domain": _lazy_eager(cg.sub)})
    define(src, f"<graphfuser launcher {cg.name}>", ns)
    run = ns["run"]
    run.namespace = ns
    return run


def _first_launch(load: Callable[[int], Any], i: int) -> Callable[..., None]:
    """``_l{i}`` until variant ``i`` is loaded: loads it (which rebinds ``_l{i}``) and launches."""
    def launch(*args: Any, **kwargs: Any) -> None:
        load(i).launch(*args, **kwargs)
    return launch


def _lazy_eager(sub: Graph) -> Callable:
    """The group's eager runner, built on first use (calls with an empty iteration domain)."""
    box: list = []

    def run(*args):
        if not box:
            box.append(eager_runner(sub, "fallback"))
        return box[0](*args)

    return run


# -- entry point -----------------------------------------------------------------------------
def repro_root() -> str:
    """Where repros go: ``config.repro_dir``, else ``<cache root>/repro``. Nothing is created
    until a fusion fails."""
    if config.repro_dir:
        return os.path.expanduser(str(config.repro_dir))
    from ..runtime.cache import cache_root

    return str(cache_root() / "repro")


def write_repro(name: str, sub: Graph, source: str, error: BaseException) -> str:
    """Write the group's IR, input types, generated source and the error; returns the path."""
    root = repro_root()
    os.makedirs(root, exist_ok=True)
    path = os.path.join(root, f"{name}-{hashlib.sha1(str(sub).encode()).hexdigest()[:10]}.txt")
    log = getattr(error, "log", "") or ""
    types = "\n".join(f"  %{v.name} : {v.type}" for v in sub.inputs)
    try:  # the same fusion as a standalone FusionDefinition script, written next to the report
        from ..ops.python_definition import repro_script

        script = repro_script(sub, title=name)
        with open(path[:-4] + ".py", "w") as f:
            f.write(script)
    except Exception as e:  # noqa: BLE001 - a repro must not fail for want of a definition
        script = f"# no python definition: {type(e).__name__}: {e}\n"
    with open(path, "w") as f:
        f.write(f"# graphfuser repro for {name}\n# error: {type(error).__name__}: {error}\n\n"
                f"## fusion IR\n{sub}\n## input types\n{types}\n\n## generated source\n{source}\n"
                f"## compiler log\n{log}\n## traceback\n{''.join(traceback.format_exception(error))}\n"
                f"## python definition (standalone script, also in {os.path.basename(path[:-4])}.py)\n{script}")
    return path


def compile_group(group: Node, scheduler: Optional[PointwiseScheduler] = None,
                  definition: Optional[str] = None) -> Callable[..., tuple]:
    """The runner of a fusion group. ``scheduler``: a hand schedule instead of the automatic one
    (its errors raise); ``definition``: the python_definition text to dump (default: printed
    from the subgraph)."""
    sub = group.subgraph
    target = "cuda" if group.kind == "prim::CudaFusionGroup" else "cpu"
    if config.dumps("python_definition"):
        from ..ops.python_definition import dump_python_definition

        dump_python_definition(sub, group.attrs.get("cache_id", 0), definition)
    key = canonical_key(sub, target) + ((scheduler.key,) if scheduler is not None else ())
    with _LOCKS_LOCK:
        lock = _KEY_LOCKS.setdefault(key, threading.Lock())
    with lock:
        return _compile_group(group, sub, target, key, scheduler)


def _compile_group(group: Node, sub: Graph, target: str, key: tuple,
                   scheduler: Optional[PointwiseScheduler]) -> Callable[..., tuple]:
    hit = _MEMORY.get(key)
    if hit is not None:
        with _STATS_LOCK:
            STATS["memory_hits"] += 1
        jit_log("kernel_cache", 2, f"memory hit for {group.kind}[cache_id={group.attrs.get('cache_id')}]")
        return hit
    name = f"{'cuda' if target == 'cuda' else 'cpu'}_fusion_{hashlib.sha1(key[0].encode()).hexdigest()[:12]}"
    device = sub.outputs[0].type.device
    cg = None
    t0 = time.perf_counter()
    try:
        if scheduler is None and needs_axes(sub.block.nodes):   # reductions / normalizations
            if any(isinstance(v.type, TensorType) and v.type.device != device for v in sub.inputs):
                raise LoweringError("reduction kernels take no CPU 0-dim tensors as scalar arguments")
            from .compiled_reduction import ReductionGroup, build_reduction_launcher

            cg = ReductionGroup(sub, target, device, name)
            launcher = build_reduction_launcher(cg)
        else:
            cg = CompiledGroup(sub, target, device, name, scheduler)
            launcher = _build_launcher(cg)
    except Exception as e:  # compile error, unsupported lowering, missing toolchain
        if scheduler is not None and isinstance(e, ScheduleError):
            raise  # an illegal hand schedule is the user's error, not a reason to fall back
        return _failed(group.kind, name, sub, cg.source if cg else "", e)
    with _STATS_LOCK:
        STATS["builds"] += 1
        STATS["build_seconds"] += time.perf_counter() - t0
    jit_log("kernel_cache", 1, f"built {name} for {group.kind} in {1e3 * (time.perf_counter() - t0):.1f} ms")
    runner = _guard_launch(launcher, group.kind, name, sub, cg)
    _MEMORY[key] = runner
    return runner


def _failed(kind: str, name: str, sub: Graph, source: str, e: BaseException) -> Callable:
    path = write_repro(name, sub, source, e)
    msg = (f"graphfuser: {kind} ({name}) could not be compiled: {type(e).__name__}: "
           f"{str(e).splitlines()[0] if str(e) else ''}. Repro written to {path}")
    if config.is_disabled("fallback"):
        raise FusionFailure(msg) from e
    warn(msg + "; running the eager fallback for this group")
    return eager_runner(sub, "fallback")


def _guard_launch(launcher: Callable, kind: str, name: str, sub: Graph, cg: CompiledGroup) -> Callable:
    """Arm the launcher's failure path: on a launch error it warns once (or raises with fallback
    disabled), writes the repro and from then on runs the eager fallback. The runner lives in the
    kernel cache for the whole process: it holds the group's kind, never its node (whose graph
    belongs to one scripted function)."""
    ns = launcher.namespace

    def fail(e: BaseException, args: tuple) -> tuple:
        eager = _failed(kind, name, sub, cg.source, e)
        ns["_eager"], ns["_broken"] = eager, True
        return eager(*args)

    ns["_fail"] = fail
    launcher.compiled = cg
    if config.dumps("dump_eff_bandwidth") and cg.target == "cuda":
        return _with_bandwidth(launcher, name)
    return launcher


def _with_bandwidth(run: Callable, name: str) -> Callable:
    def timed(*args):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        outs = run(*args)
        end.record()
        end.synchronize()
        nbytes = sum(a.numel() * a.element_size() for a in args if isinstance(a, torch.Tensor))
        nbytes += sum(o.numel() * o.element_size() for o in outs)
        ms = start.elapsed_time(end)
        print(f"[dump_eff_bandwidth] {name}: {nbytes / (ms * 1e6) if ms else 0:.1f} GB/s ({ms * 1e3:.1f} us)")
        return outs
    timed.compiled = getattr(run, "compiled", None)
    return timed
