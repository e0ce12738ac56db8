"""Load a CUBIN into torch's primary context and launch it with the CUDA driver API.

The launch is the hot path of every fused call, so :class:`CudaKernel` does all the work it can
once, at construction: it loads the module, fetches (and eagerly loads) the function, and builds
ONE ctypes struct of argument slots plus the ``void*[]`` array pointing at them. A launch then
writes the argument values into the slots (one ``struct.pack_into``) and calls ``cuLaunchKernel``
with the array's address: no dicts, no per-call Python objects beyond cuda-bindings' result.
``config.cuda["launch_api"]`` picks the call: ``shim`` (the default) packs the driver function,
grid, block and stream into the same buffer and calls a C function of one pointer that calls
``cuLaunchKernel`` (built once with the system compiler; ``bindings`` where it cannot be);
``bindings`` calls cuda-bindings' ``cuLaunchKernel`` (eleven Python arguments and a ``CUresult``
enum per launch); ``ctypes`` calls the driver library's function with eleven ctypes conversions.
One run on an H200 host, per launch of an empty kernel: 5.25 us, 5.48 us and 7.34 us.

Streams are raw ``cudaStream_t`` handles from :func:`raw_stream` (torch's current stream for the
device, 0.1 us; ``torch.cuda.current_stream().cuda_stream`` costs 4 us). Launching on the stream
being captured by ``torch.cuda.graph`` records the kernel into the graph.

Example::

    >>> k = CudaKernel(cubin, "add_one", 0, ["ptr", "ptr", "i64"])      # doctest: +SKIP
    >>> k.launch((blocks, 1, 1), (128, 1, 1), raw_stream(0),          # doctest: +SKIP
    ...          x.data_ptr(), out.data_ptr(), x.numel())
"""
from __future__ import annotations

import ctypes
import functools
import struct
import sys
from typing import Callable, Optional, Sequence

import torch

from ..config import config
from ..log import jit_log
from .errors import LaunchError

# ctypes type of each argument kind (the C parameter type the kernel declares).
ARG_CTYPES: dict[str, type] = {
    "ptr": ctypes.c_uint64,   # a device pointer, passed as int (tensor.data_ptr())
    "i32": ctypes.c_int32,
    "u32": ctypes.c_uint32,
    "i64": ctypes.c_int64,
    "f32": ctypes.c_float,
    "f64": ctypes.c_double,
}


LAUNCH_APIS = ("shim", "bindings", "ctypes")

# struct codes with C alignment ("@") matching ARG_CTYPES.
_STRUCT_CODES = {"ptr": "Q", "i32": "i", "u32": "I", "i64": "q", "f32": "f", "f64": "d"}


def _driver():
    from cuda.bindings import driver  # noqa: PLC0415 (optional dependency)

    return driver


def raw_stream(device_index: int) -> int:
    """Torch's current stream on ``device_index`` as a raw ``cudaStream_t`` int (0.1 us)."""
    return torch._C._cuda_getCurrentRawStream(device_index)


# The same query without the Python frame: generated launchers bind it and call it once per
# launch (a ``torch.cuda.stream`` context entered between calls is honoured by the next call).
RAW_STREAM: Callable[[int], int] = getattr(torch._C, "_cuda_getCurrentRawStream", raw_stream)


def single_device() -> bool:
    """Whether this process sees exactly one CUDA device. Then the current device is always that
    one, and a tensor on CUDA is on it: launches skip the current-device check and guards the
    ``get_device()`` call. The count is fixed once CUDA is initialized (torch caches it)."""
    return torch.cuda.device_count() == 1


@functools.lru_cache(maxsize=None)
def device_arch(device_index: int) -> int:
    """Compute capability as ``major * 10 + minor`` (90 for H100/H200)."""
    major, minor = torch.cuda.get_device_capability(device_index)
    return major * 10 + minor


@functools.lru_cache(maxsize=None)
def sm_count(device_index: int) -> int:
    """Number of streaming multiprocessors on the device (cached)."""
    return torch.cuda.get_device_properties(device_index).multi_processor_count


@functools.lru_cache(maxsize=None)
def max_shared_optin(device_index: int) -> int:
    """Bytes of shared memory a block may opt in to (227 KiB on an H100 / H200), cached."""
    drv = _driver()
    dev = _check(drv.cuDeviceGet(device_index), "cuDeviceGet", "<none>")
    attr = drv.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN
    return int(_check(drv.cuDeviceGetAttribute(attr, dev), "cuDeviceGetAttribute", "<none>"))


def error_string(err) -> str:
    """``"CUDA_ERROR_X: description"`` for a ``CUresult``."""
    drv = _driver()
    try:
        if isinstance(err, int):       # a ctypes launch returns the code as an int
            err = drv.CUresult(err)
        _, name = drv.cuGetErrorName(err)
        _, text = drv.cuGetErrorString(err)
        return f"{name.decode()}: {text.decode()}"
    except Exception:  # an unknown code
        return repr(err)


def _check(result, what: str, kernel: str):
    """Unpack a cuda-python result tuple; raise :class:`LaunchError` on a non-success code."""
    err = result[0]
    if err:
        raise LaunchError(f"{what} failed for kernel {kernel}: {error_string(err)}")
    return result[1] if len(result) == 2 else result[1:]


_retained: dict[int, object] = {}


def ensure_context(device_index: int, kernel: str = "<none>"):
    """Make torch's primary context of ``device_index`` current on this thread; return it.

    Call inside ``with torch.cuda.device(device_index)``: torch then restores its own device
    (and so its context) on exit.
    """
    drv = _driver()
    torch.cuda.init()
    _check(drv.cuInit(0), "cuInit", kernel)
    ctx = _check(drv.cuCtxGetCurrent(), "cuCtxGetCurrent", kernel)
    if int(ctx) != 0 and int(_check(drv.cuCtxGetDevice(), "cuCtxGetDevice", kernel)) == device_index:
        return ctx
    primary = _retained.get(device_index)
    if primary is None:
        dev = _check(drv.cuDeviceGet(device_index), "cuDeviceGet", kernel)
        primary = _check(drv.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain", kernel)
        _retained[device_index] = primary  # kept for the process's lifetime, as torch's is
    _check(drv.cuCtxSetCurrent(primary), "cuCtxSetCurrent", kernel)
    jit_log("compile", 2, f"made the primary context of cuda:{device_index} current")
    return primary


@functools.lru_cache(maxsize=None)
def driver_library() -> Optional[ctypes.CDLL]:
    """The CUDA driver library through ctypes, or None where it cannot be opened."""
    for name in ("libcuda.so.1", "libcuda.so", "nvcuda.dll"):
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    return None


@functools.lru_cache(maxsize=None)
def driver_launchers() -> Optional[tuple[Callable, Callable]]:
    """``(cuLaunchKernel, cuLaunchCooperativeKernel)`` of the driver library through ctypes, or
    None where it cannot be opened. They return the ``CUresult`` as a plain int: a launch makes
    no Python objects (cuda-bindings builds a ``CUresult`` enum and a result tuple per call)."""
    lib = driver_library()
    if lib is None:
        return None
    u, p = ctypes.c_uint, ctypes.c_void_p
    launch, coop = lib.cuLaunchKernel, lib.cuLaunchCooperativeKernel
    launch.argtypes = [p, u, u, u, u, u, u, u, p, p, p]     # f, grid, block, shared, stream, params, extra
    coop.argtypes = [p, u, u, u, u, u, u, u, p, p]
    launch.restype = coop.restype = ctypes.c_int
    return launch, coop


# A launch through a C function of one argument: the address of one buffer holding the driver
# function, the kernel, grid, block, shared memory, stream, the argument array and then the
# argument slots. Python writes the buffer with one ``struct.pack_into`` and makes one ctypes
# call with one integer; cuda-bindings converts eleven arguments and builds a ``CUresult`` per
# call, ctypes converts eleven. Built once per machine with the C++ compiler of the CPU kernels
# (disk-cached; not counted among the kernel compiler runs).
_SHIM_SOURCE = r"""
extern "C" {
typedef int (*gf_launch_t)(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                           unsigned, void*, void**, void**);
typedef int (*gf_coop_t)(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                         unsigned, void*, void**);
struct gf_head { void* fn; void* func; unsigned g0, g1, g2, b0, b1, b2, shared; void* stream; void** params; };
int gf_launch(const struct gf_head* h) {
  return ((gf_launch_t)h->fn)(h->func, h->g0, h->g1, h->g2, h->b0, h->b1, h->b2, h->shared, h->stream, h->params, 0);
}
int gf_launch_coop(const struct gf_head* h) {
  return ((gf_coop_t)h->fn)(h->func, h->g0, h->g1, h->g2, h->b0, h->b1, h->b2, h->shared, h->stream, h->params);
}
}
"""
# the fixed part of the head, written once, and the part a launch writes (grid, block, shared
# memory, stream), in the C struct's layout
_HEAD_FIXED = "@PP"
_HEAD_CALL = "IIIIIIIPP"


@functools.lru_cache(maxsize=None)
def shim_launchers() -> Optional[tuple[Callable, Callable]]:
    """``(gf_launch, gf_launch_coop)`` of the launch shim, or None where it cannot be built (no C
    compiler) or the driver library cannot be opened: launches then go through cuda-bindings."""
    if driver_launchers() is None:
        return None
    try:
        from . import cache, cpu  # noqa: PLC0415

        cxx, flags = config.cpu["cxx"], ["-O2", "-shared", "-fPIC"]
        cid = cpu.compiler_id(cxx)
        path = cache.get_or_build_file(
            "launch_shim", _SHIM_SOURCE, flags, cid, "so",
            lambda out: cpu._build_shared_object(cxx, cid, flags, _SHIM_SOURCE, out, count=False))
        lib = ctypes.CDLL(path)
    except Exception as e:  # noqa: BLE001 - any failure: the cuda-bindings path works without it
        jit_log("compile", 1, f"no launch shim ({e}); CUDA launches go through cuda-bindings")
        return None
    pair = []
    for name in ("gf_launch", "gf_launch_coop"):
        fn = getattr(lib, name)
        fn.argtypes, fn.restype = [ctypes.c_void_p], ctypes.c_int
        pair.append(fn)
    return pair[0], pair[1]


# The generated launch: unrolled slot writes, everything else bound as closure constants.
# {extra}: cuLaunchKernel's ``extra`` argument (0); cuLaunchCooperativeKernel has none. Kernels
# whose blocks wait for each other (grid barriers) need every block resident at once, which only
# a cooperative launch guarantees (it refuses a grid that does not fit). {result}: ``[0]`` where
# the launch returns cuda-bindings' ``(CUresult,)``, nothing where it returns the int (ctypes).
_LAUNCH_TEMPLATE = '''
def launch(grid, block, stream{params}, shared_mem=0):
{device_check}    _pack(_buf, 0{args_tail})
    err = _cuLaunchKernel(_func, grid[0], grid[1], grid[2], block[0], block[1], block[2],
                          shared_mem, stream, _params{extra}){result}
    if err:
        _raise(err, grid, block, shared_mem)
'''


_SHIM_TEMPLATE = '''
def launch(grid, block, stream{params}, shared_mem=0):
{device_check}    _pack(_buf, _at, grid[0], grid[1], grid[2], block[0], block[1], block[2], shared_mem, stream, _params{args_tail})
    err = _shim(_head)
    if err:
        _raise(err, grid, block, shared_mem)
'''


class CudaKernel:
    """One ``extern "C" __global__`` function of a CUBIN, loaded on one device, ready to launch.

    ``arg_kinds`` lists the kernel's parameters in order: ``"ptr"`` (device pointer as int),
    ``"i32"``, ``"i64"``, ``"f32"``, ``"f64"``. ``launch(grid, block, stream, *args,
    shared_mem=0)`` returns nothing and raises :class:`LaunchError` when the launch is refused.
    ``cooperative``: launch with ``cuLaunchCooperativeKernel`` (kernels with grid barriers).
    ``api``: ``"ctypes"`` (the driver library's function, called with the prebuilt argument
    array) or ``"bindings"`` (cuda-bindings); default ``config.cuda["launch_api"]``.
    """

    def __init__(self, cubin: bytes, name: str, device_index: int, arg_kinds: Sequence[str],
                 cooperative: bool = False, api: Optional[str] = None) -> None:
        for kind in arg_kinds:
            if kind not in ARG_CTYPES:
                raise ValueError(f"kernel {name}: unknown arg kind {kind!r}; valid kinds are: "
                                 f"{', '.join(ARG_CTYPES)}")
        drv = _driver()
        self.name = name
        self.cooperative = bool(cooperative)
        self.device_index = int(device_index)
        self.arg_kinds = tuple(arg_kinds)
        self.api = api or str(config.cuda.get("launch_api", "shim"))
        if self.api not in LAUNCH_APIS:
            raise ValueError(f"kernel {name}: launch_api must be one of {', '.join(LAUNCH_APIS)}, got {self.api!r}")
        with torch.cuda.device(self.device_index):
            self.context = ensure_context(self.device_index, name)
            self.module = _check(drv.cuModuleLoadData(bytes(cubin)), "cuModuleLoadData", name)
            self.func = _check(drv.cuModuleGetFunction(self.module, name.encode()),
                               "cuModuleGetFunction", name)
            # Load now, not lazily at the first launch (CUDA_MODULE_LOADING=LAZY): the first
            # launch may be inside a CUDA graph capture.
            if hasattr(drv, "cuFuncLoad"):
                _check(drv.cuFuncLoad(self.func), "cuFuncLoad", name)

        # ONE buffer of argument slots (C struct layout) and ONE void*[] pointing at them, built
        # once; a launch packs every argument with a single struct.pack_into call.
        # Through the launch shim the slots follow the shim's head in the same buffer.
        self._shim = shim_launchers() if self.api == "shim" else None
        head = _HEAD_FIXED + _HEAD_CALL if self._shim is not None else "@"
        codes = "".join(_STRUCT_CODES[k] for k in self.arg_kinds)
        self._struct = struct.Struct(head + codes)
        self.slots = ctypes.create_string_buffer(max(8, self._struct.size))
        self._ptrs = (ctypes.c_void_p * max(1, len(self.arg_kinds)))()
        base = ctypes.addressof(self.slots)
        for i in range(len(self.arg_kinds)):
            prefix = head + codes[:i + 1]
            self._ptrs[i] = base + struct.calcsize(prefix) - struct.calcsize("@" + codes[i])
        self.params_address = ctypes.addressof(self._ptrs) if self.arg_kinds else 0
        self._resident: dict[tuple[int, int], int] = {}
        self.launch: Callable[..., None] = self._build_launch()
        if config.dumps("launch_param") or config.dumps("kernel_args"):
            self.launch = self._dumping(self.launch)

    # -- launch ---------------------------------------------------------------------------
    def _build_launch(self) -> Callable[..., None]:
        n = len(self.arg_kinds)
        params = "".join(f", a{i}" for i in range(n))
        args = "".join(f"a{i}, " for i in range(n))
        args_tail = "".join(f", a{i}" for i in range(n))
        # With one visible device the current device is ours: no check (and no call) per launch.
        device_check = "" if single_device() else (
            "    if _get_device() != _device:\n"
            f"        return _launch_elsewhere(grid, block, stream, ({args}), shared_mem)\n")
        if getattr(self, "_shim", None) is not None:
            return self._build_shim_launch(params, args, args_tail, device_check)
        native = driver_launchers() if self.api == "ctypes" else None
        if native is not None:
            launcher, func = native[1 if self.cooperative else 0], int(self.func)
        else:
            drv = _driver()
            launcher, func = drv.cuLaunchCooperativeKernel if self.cooperative else drv.cuLaunchKernel, self.func
        self.launch_api = "ctypes" if native is not None else "bindings"
        src = _LAUNCH_TEMPLATE.format(params=params, args_tail=args_tail, device_check=device_check,
                                      extra="" if self.cooperative else (", None" if native else ", 0"),
                                      result="" if native else "[0]")
        self.launch_source = src
        namespace = {
            "_get_device": getattr(torch._C, "_cuda_getDevice", None),     # absent from CPU builds
            "_device": self.device_index,
            "_launch_elsewhere": self._launch_elsewhere,
            "_buf": self.slots,
            "_pack": self._struct.pack_into,
            "_cuLaunchKernel": launcher,
            "_func": func,
            "_params": self.params_address,
            "_raise": self._raise,
        }
        exec(compile(src, f"<launch {self.name}>", "exec"), namespace)  # noqa: S102
        return namespace["launch"]

    def _build_shim_launch(self, params: str, args: str, args_tail: str, device_check: str) -> Callable[..., None]:
        """The launch through the shim: the head's fixed part (the driver function and the
        kernel) is written here, once; a launch packs the rest of the head and the arguments."""
        native = driver_launchers()
        fn = ctypes.cast(native[1 if self.cooperative else 0], ctypes.c_void_p).value
        struct.pack_into(_HEAD_FIXED, self.slots, 0, fn, int(self.func))
        self.launch_api = "shim"
        src = _SHIM_TEMPLATE.format(params=params, args_tail=args_tail, device_check=device_check)
        self.launch_source = src
        call = struct.Struct("@" + self._struct.format[len(_HEAD_FIXED):])
        namespace = {
            "_get_device": getattr(torch._C, "_cuda_getDevice", None),
            "_device": self.device_index,
            "_launch_elsewhere": self._launch_elsewhere,
            "_buf": self.slots,
            "_pack": call.pack_into,
            "_at": struct.calcsize(_HEAD_FIXED),
            "_shim": self._shim[1 if self.cooperative else 0],
            "_head": ctypes.addressof(self.slots),
            "_params": self.params_address,
            "_raise": self._raise,
        }
        exec(compile(src, f"<launch {self.name}>", "exec"), namespace)  # noqa: S102
        return namespace["launch"]

    def _launch_elsewhere(self, grid, block, stream, args, shared_mem) -> None:
        """Slow path: the current device is not ours; switch to it for the launch."""
        with torch.cuda.device(self.device_index):
            self.launch(grid, block, stream, *args, shared_mem=shared_mem)

    def _raise(self, err, grid, block, shared_mem) -> None:
        raise LaunchError(
            f"{'cuLaunchCooperativeKernel' if self.cooperative else 'cuLaunchKernel'} failed for kernel {self.name} on cuda:{self.device_index} "
            f"(grid={tuple(grid)}, block={tuple(block)}, shared_mem={shared_mem}): "
            f"{error_string(err)}"
        )

    def _dumping(self, launch: Callable[..., None]) -> Callable[..., None]:
        def launch_and_dump(grid, block, stream, *args, shared_mem=0):
            if config.dumps("launch_param"):
                print(f"[launch_param] {self.name}: grid={tuple(grid)} block={tuple(block)} "
                      f"shared_mem={shared_mem} stream={stream:#x}", file=sys.stdout)
            if config.dumps("kernel_args"):
                shown = ", ".join(f"{k}={v:#x}" if k == "ptr" else f"{k}={v}"
                                  for k, v in zip(self.arg_kinds, args))
                print(f"[kernel_args] {self.name}({shown})", file=sys.stdout)
            launch(grid, block, stream, *args, shared_mem=shared_mem)

        return launch_and_dump

    # -- attributes -----------------------------------------------------------------------
    def set_max_dynamic_shared(self, nbytes: int) -> None:
        """Allow more than 48 KiB of dynamic shared memory per block: ``nbytes``, capped at what
        the device lets a block opt in to beside the kernel's static shared memory (asking for
        more fails the call with CUDA_ERROR_INVALID_VALUE; a launch that needs more than the cap
        fails on its own and its group falls back)."""
        drv = _driver()
        cap = max_shared_optin(self.device_index) - self.attribute("SHARED_SIZE_BYTES")
        attr = drv.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        _check(drv.cuFuncSetAttribute(self.func, attr, int(min(nbytes, cap))), "cuFuncSetAttribute", self.name)

    def attribute(self, name: str) -> int:
        """A ``CU_FUNC_ATTRIBUTE_*`` value, e.g. ``attribute("MAX_THREADS_PER_BLOCK")``."""
        drv = _driver()
        attr = getattr(drv.CUfunction_attribute, f"CU_FUNC_ATTRIBUTE_{name}")
        return int(_check(drv.cuFuncGetAttribute(attr, self.func), "cuFuncGetAttribute", self.name))

    def resident_blocks(self, threads: int, shared_mem: int = 0) -> int:
        """Blocks of ``threads`` threads (and ``shared_mem`` bytes of dynamic shared memory) that
        fit on the whole device at once (``cuOccupancyMaxActiveBlocksPerMultiprocessor`` times
        the SM count), at least 1. Cached per launch shape."""
        hit = self._resident.get((threads, shared_mem))
        if hit is None:
            drv = _driver()
            if shared_mem > 48 * 1024:
                self.set_max_dynamic_shared(shared_mem)
            per_sm = _check(drv.cuOccupancyMaxActiveBlocksPerMultiprocessor(self.func, int(threads), int(shared_mem)),
                            "cuOccupancyMaxActiveBlocksPerMultiprocessor", self.name)
            hit = self._resident[(threads, shared_mem)] = max(1, int(per_sm)) * sm_count(self.device_index)
        return hit

    def unload(self) -> None:
        """Unload the module (only once nothing, including a CUDA graph, still uses it)."""
        if self.module is not None:
            _check(_driver().cuModuleUnload(self.module), "cuModuleUnload", self.name)
            self.module = None

    def __repr__(self) -> str:
        return (f"CudaKernel({self.name!r}, cuda:{self.device_index}, "
                f"args=[{', '.join(self.arg_kinds)}])")


def launch_func(kernel: CudaKernel, grid: tuple[int, int, int], block: tuple[int, int, int],
                stream: int, *args, shared_mem: int = 0) -> None:
    """Launch ``kernel``; returns nothing, raises :class:`LaunchError` on failure."""
    kernel.launch(grid, block, stream, *args, shared_mem=shared_mem)
