"""CUDA C++ -> CUBIN through NVRTC (cuda-python's ``cuda.bindings.nvrtc``).

NVRTC needs no GPU, so every CUDA kernel can be compiled (and checked) on any machine. The result
is always a CUBIN for one ``sm_XY`` (never PTX: no JIT at load time), cached in memory and on disk
through :mod:`graphfuser.runtime.cache` keyed by source, options and NVRTC version.

Example::

    >>> from graphfuser.runtime import nvrtc
    >>> cubin = nvrtc.compile_cubin(src, "add_one", arch=90)   # doctest: +SKIP
    >>> cubin[:4]                                              # doctest: +SKIP
    b'\\x7fELF'
"""
from __future__ import annotations

import functools
import os
import time
from typing import Sequence

from ..config import config
from ..log import jit_log
from .errors import CompileError

# Headers the fp16/bf16 code paths include; a directory counts when it holds either.
_FP16_HEADERS = ("cuda_fp16.h", "cuda_bf16.h")
# Subdirectories of the ``nvidia`` namespace package that the NVIDIA wheels install headers in.
_WHEEL_INCLUDE_SUBDIRS = ("cu13/include", "cu12/include", "cuda_runtime/include",
                          "cuda_nvrtc/include", "cuda_cccl/include")


def _nvrtc_module():
    from cuda.bindings import nvrtc  # noqa: PLC0415 (optional dependency)

    return nvrtc


@functools.lru_cache(maxsize=None)
def available() -> tuple[bool, str]:
    """``(True, "")`` when ``cuda.bindings.nvrtc`` imports and libnvrtc loads, else ``(False, why)``."""
    try:
        nvrtc = _nvrtc_module()
    except Exception as exc:  # ImportError, or a broken install
        return False, f"cuda.bindings.nvrtc does not import: {type(exc).__name__}: {exc}"
    try:
        err, major, minor = nvrtc.nvrtcVersion()
    except Exception as exc:  # libnvrtc.so not found / not loadable
        return False, f"libnvrtc does not load: {type(exc).__name__}: {exc}"
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        return False, f"nvrtcVersion failed: {err!r}"
    return True, ""


@functools.lru_cache(maxsize=None)
def version() -> tuple[int, int]:
    """NVRTC's ``(major, minor)``; raises :class:`CompileError` when NVRTC is unavailable."""
    ok, why = available()
    if not ok:
        raise CompileError(f"NVRTC is not available: {why}")
    _, major, minor = _nvrtc_module().nvrtcVersion()
    return int(major), int(minor)


@functools.lru_cache(maxsize=None)
def supported_archs() -> tuple[int, ...]:
    """The ``sm_XY`` numbers this NVRTC can target (``nvrtcGetSupportedArchs``), ascending."""
    version()  # raises if unavailable
    nvrtc = _nvrtc_module()
    err, archs = nvrtc.nvrtcGetSupportedArchs()
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise CompileError(f"nvrtcGetSupportedArchs failed: {err!r}")
    return tuple(sorted(int(a) for a in archs))


def _nvidia_package_dirs() -> list[str]:
    """Every directory of the ``nvidia`` namespace package (one per site-packages holding it)."""
    try:
        import nvidia  # noqa: PLC0415 (namespace package of the NVIDIA wheels)
    except ImportError:
        return []
    return [str(p) for p in getattr(nvidia, "__path__", [])]


def include_dirs() -> list[str]:
    """Directories holding ``cuda_fp16.h`` / ``cuda_bf16.h``: NVIDIA wheels first, then CUDA_HOME.

    Empty when none is found: generated kernels then use their own minimal prelude.
    """
    return list(_include_dirs())


@functools.lru_cache(maxsize=None)
def _include_dirs() -> tuple[str, ...]:
    wheel_dirs: list[str] = []
    for base in _nvidia_package_dirs():
        wheel_dirs += [os.path.join(base, sub) for sub in _WHEEL_INCLUDE_SUBDIRS]
        # Any other wheel that ships the headers (layouts change between CUDA releases).
        try:
            entries = sorted(os.listdir(base))
        except OSError:
            entries = []
        wheel_dirs += [os.path.join(base, e, "include") for e in entries]
    found = _with_headers(wheel_dirs, [])
    if _has_all(found):
        return tuple(found)  # the wheels' headers match the wheels' NVRTC: no system CUDA mixed in
    system_dirs = [os.path.join(os.environ[var], "include")
                   for var in ("CUDA_HOME", "CUDA_PATH") if os.environ.get(var)]
    system_dirs.append("/usr/local/cuda/include")
    return tuple(_with_headers(system_dirs, found))


def _with_headers(candidates: list[str], found: list[str]) -> list[str]:
    """``found`` plus each candidate directory that holds one of the fp16/bf16 headers."""
    found = list(found)
    for d in candidates:
        d = os.path.realpath(d)
        if d not in found and any(os.path.isfile(os.path.join(d, h)) for h in _FP16_HEADERS):
            found.append(d)
    return found


def _has_all(dirs: Sequence[str]) -> bool:
    return all(any(os.path.isfile(os.path.join(d, h)) for d in dirs) for h in _FP16_HEADERS)


def has_fp16_headers() -> bool:
    """True when both ``cuda_fp16.h`` and ``cuda_bf16.h`` can be included."""
    return _has_all(_include_dirs())


def clamp_arch(arch: int) -> int:
    """The highest arch this NVRTC supports that is <= ``arch`` (logged when it differs)."""
    archs = supported_archs()
    usable = [a for a in archs if a <= arch]
    if not usable:
        raise CompileError(
            f"NVRTC {version()[0]}.{version()[1]} cannot target sm_{arch}: "
            f"its lowest supported arch is sm_{archs[0]}"
        )
    chosen = usable[-1]
    if chosen != arch:
        note = "" if chosen // 10 == arch // 10 else " (different major: the CUBIN may not load)"
        jit_log("compile", 1, f"NVRTC {version()} does not support sm_{arch}; "
                              f"compiling for sm_{chosen}{note}")
    return chosen


def build_options(arch: int, options: Sequence[str] = ()) -> list[str]:
    """The NVRTC command line for ``sm_{arch}`` (already clamped) with the config's knobs."""
    flags = [f"--gpu-architecture=sm_{arch}", "-default-device", "--std=c++17"]
    if config.is_enabled("lineinfo"):
        flags.append("-lineinfo")   # source lines for profilers; a quarter more NVRTC time
    if config.is_disabled("fma"):
        flags.append("--fmad=false")
    flags += [f"-I{d}" for d in _include_dirs()]
    flags += list(options)
    return flags


def _program_log(nvrtc, prog) -> str:
    err, size = nvrtc.nvrtcGetProgramLogSize(prog)
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS or size <= 1:
        return ""
    buf = b" " * size
    nvrtc.nvrtcGetProgramLog(prog, buf)
    return buf.rstrip(b"\x00").decode(errors="replace").strip()


def _run_nvrtc(source: str, kernel_name: str, flags: list[str], ptx: bool = False, count: bool = True) -> bytes:
    """One NVRTC invocation: source -> CUBIN bytes (``ptx``: the PTX text, for a virtual
    ``compute_XY`` architecture), or :class:`CompileError` with the log. ``count``: counted as a
    compile and logged (not the toolchain's warm-up, ``warm_up.py``)."""
    from . import cache  # noqa: PLC0415 (cache imports nothing of ours; keep import cheap)

    nvrtc = _nvrtc_module()
    ok = nvrtc.nvrtcResult.NVRTC_SUCCESS
    if count:
        cache.note_compile()
    start = time.perf_counter()
    err, prog = nvrtc.nvrtcCreateProgram(source.encode(), f"{kernel_name}.cu".encode(), 0, [], [])
    if err != ok:
        raise CompileError(f"nvrtcCreateProgram failed for kernel {kernel_name}: {err!r}",
                           source=source, command=flags)
    try:
        (err,) = nvrtc.nvrtcCompileProgram(prog, len(flags), [f.encode() for f in flags])
        log = _program_log(nvrtc, prog)
        if err != ok:
            _, name = nvrtc.nvrtcGetErrorString(err)
            raise CompileError(
                f"NVRTC failed to compile kernel {kernel_name} ({name.decode()}):\n{log}\n"
                f"options: {' '.join(flags)}",
                source=source, log=log, command=flags,
            )
        if ptx:
            err, size = nvrtc.nvrtcGetPTXSize(prog)
            text = b" " * size
            if err != ok or nvrtc.nvrtcGetPTX(prog, text)[0] != ok:
                raise CompileError(f"NVRTC produced no PTX for kernel {kernel_name} ({err!r})\n{log}",
                                   source=source, log=log, command=flags)
            if f".entry {kernel_name}(".encode() not in text:
                raise CompileError(f"kernel {kernel_name} is not an entry of the PTX: declare it "
                                   f'extern "C" __global__', source=source, log=log, command=flags)
            return text.rstrip(b"\x00")
        err, size = nvrtc.nvrtcGetCUBINSize(prog)
        if err != ok or size == 0:
            raise CompileError(f"NVRTC produced no CUBIN for kernel {kernel_name} ({err!r}); "
                               f"is --gpu-architecture a real sm_XY?\n{log}",
                               source=source, log=log, command=flags)
        cubin = b" " * size
        (err,) = nvrtc.nvrtcGetCUBIN(prog, cubin)
        if err != ok:
            raise CompileError(f"nvrtcGetCUBIN failed for kernel {kernel_name}: {err!r}",
                               source=source, log=log, command=flags)
    finally:
        nvrtc.nvrtcDestroyProgram(prog)
    ms = (time.perf_counter() - start) * 1e3
    if count:
        jit_log("compile", 1, f"NVRTC compiled {kernel_name} ({flags[0]}) in {ms:.1f} ms, "
                              f"{len(cubin)} bytes")
    if log and count:
        jit_log("compile", 2, f"NVRTC log for {kernel_name}:\n{log}")
    if f".text.{kernel_name}\0".encode() not in cubin:  # the kernel's code section
        raise CompileError(f"kernel {kernel_name} is not in the compiled CUBIN: declare it "
                           f'extern "C" __global__', source=source, log=log, command=flags)
    return cubin


def compile_ptx(source: str, kernel_name: str, arch: int, options: Sequence[str] = ()) -> bytes:
    """Compile ``source`` to PTX for the virtual ``compute_{arch}`` (NVRTC's front end and
    optimizer without the assembler: about a third of a CUBIN's time). What a machine without a
    GPU checks of generated CUDA; ``kernel_name`` must be an entry. Not cached."""
    ok, why = available()
    if not ok:
        raise CompileError(f"cannot compile kernel {kernel_name}: NVRTC is not available: {why}",
                           source=source)
    flags = build_options(clamp_arch(int(arch)), options)
    flags[0] = flags[0].replace("=sm_", "=compute_")
    return _run_nvrtc(source, kernel_name, flags, ptx=True)


def compile_cubin(source: str, kernel_name: str, arch: int, options: Sequence[str] = ()) -> bytes:
    """Compile ``source`` to a CUBIN for ``sm_{arch}`` (clamped to what NVRTC supports).

    Cached (memory, then disk) on source, options and NVRTC version; NVRTC only runs on a miss.
    Raises :class:`CompileError` (message holds NVRTC's log and the kernel name) on failure.
    """
    from .cache import get_or_build_bytes  # noqa: PLC0415

    ok, why = available()
    if not ok:
        raise CompileError(f"cannot compile kernel {kernel_name}: NVRTC is not available: {why}",
                           source=source)
    flags = build_options(clamp_arch(int(arch)), options)
    major, minor = version()
    return get_or_build_bytes("cubin", source, flags, f"nvrtc-{major}.{minor}",
                              lambda: _run_nvrtc(source, kernel_name, flags))
