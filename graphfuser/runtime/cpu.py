"""Compile generated C++ kernels with the system compiler and call them through ctypes.

The kernels are self-contained C++ (no ATen headers) exporting ``extern "C"`` functions. They are
compiled to shared objects with ``config.cpu["cxx"]`` (env ``CXX``) and ``config.cpu["cxxflags"]``
(``-O3 -march=native -fopenmp -shared -fPIC -std=c++17`` by default), cached on disk by
:mod:`graphfuser.runtime.cache`, and loaded once per path with ``ctypes.CDLL``.

Example::

    >>> from graphfuser.runtime.cpu import CpuKernel, compile_cpp
    >>> so = compile_cpp('extern "C" void k(const float* a, float* o, long long n)'
    ...                  ' { for (long long i = 0; i < n; ++i) o[i] = a[i] + 1; }')
    >>> k = CpuKernel(so, "k", ["ptr", "ptr", "i64"])
    >>> k(a.data_ptr(), out.data_ptr(), a.numel())

Launchers call kernels *packed*: ``packed_entries`` adds an ``extern "C" <name>_packed(const
char*)`` beside a kernel that reads its arguments from one buffer of 8-byte slots, and the
launcher passes ``struct.pack`` of the arguments (``CpuKernel(..., packed=True)``).
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import pathlib
import shlex
import struct
import subprocess
import tempfile
import threading
from typing import Sequence

from graphfuser.codegen.dialects import PRELUDE_END
from graphfuser.config import config
from graphfuser.log import jit_log
from graphfuser.runtime import cache
from graphfuser.runtime.errors import CompileError

# ctypes type per kernel argument kind.
ARG_CTYPES: dict[str, type] = {
    "ptr": ctypes.c_void_p,
    "i64": ctypes.c_int64,
    "i32": ctypes.c_int32,
    "f64": ctypes.c_double,
    "f32": ctypes.c_float,
    "bool": ctypes.c_bool,
}

# Packed calls. ctypes converts every argument through its ``argtypes`` entry: 0.7 us for the
# ten arguments of a small kernel on a CPU host, a good part of a fused call at tiny sizes. One
# ``struct.pack`` of the same ten into a bytes object, passed as one ``char*``, costs 0.3 us. The
# bytes object is made per call, so calls from several threads share no buffer; each slot is 8
# bytes and read with memcpy (no alignment assumed).
PACK_FORMAT: dict[str, str] = {"ptr": "q", "i64": "q", "i32": "q", "bool": "q", "f64": "d", "f32": "d"}
_SLOT_READ: dict[str, str] = {
    "ptr": "gf_slot{{a + {o}}}",           # converts to whatever pointer type the parameter has
    "i64": "gf_slot_i64(a + {o})",
    "i32": "(int)gf_slot_i64(a + {o})",
    "bool": "gf_slot_i64(a + {o}) != 0",
    "f64": "gf_slot_f64(a + {o})",
    "f32": "(float)gf_slot_f64(a + {o})",
}
_PACKED_PRELUDE = r"""
#ifndef GF_PACKED_SLOTS
#define GF_PACKED_SLOTS
#include <string.h>
struct gf_slot {
  const char* p;
  template <typename T> operator T*() const { long long v; memcpy(&v, p, 8); return (T*)v; }
};
static inline long long gf_slot_i64(const char* p) { long long v; memcpy(&v, p, 8); return v; }
static inline double gf_slot_f64(const char* p) { double v; memcpy(&v, p, 8); return v; }
#endif
"""


def packed_entries(names: Sequence[str], arg_kinds: Sequence[str]) -> str:
    """C++ source to append to a kernel library: ``<name>_packed(const char* a)`` for each of
    ``names`` (kernels taking ``arg_kinds``), calling the kernel with slot ``i`` (bytes
    ``8 i .. 8 i + 7`` of ``a``, as ``struct.pack`` with ``PACK_FORMAT`` writes them) as
    argument ``i``."""
    call = ", ".join(_SLOT_READ[k].format(o=8 * i) for i, k in enumerate(arg_kinds))
    fns = "".join(f'extern "C" void {n}_packed(const char* a) {{ {n}({call}); }}\n' for n in names)
    return _PACKED_PRELUDE + fns


# Flags some compilers do not accept (clang without libomp, -march=native on some targets):
# dropped, with a log line, when the compiler rejects them.
OPTIONAL_FLAGS = ("-march=native", "-fopenmp")
# Words in a compiler's diagnostics that blame each optional flag.
_BLAME = {
    "-march=native": ("-march=native", "march="),
    "-fopenmp": ("-fopenmp", "omp.h", "gomp", "libomp", "-lomp"),
}
COMPILE_TIMEOUT_S = 600

_COMPILER_IDS: dict[str, str] = {}
_REJECTED: dict[str, set[str]] = {}  # cxx -> optional flags it refused in this process
_LIBS: dict[str, ctypes.CDLL] = {}  # one loaded library per path; never unloaded


def compiler_id(cxx: str | None = None) -> str:
    """The first line of ``<cxx> --version`` (cached per process per compiler).

    Example::

        >>> compiler_id("g++")
        'g++ (Debian 12.2.0-14+deb12u1) 12.2.0'
    """
    cxx = config.cpu["cxx"] if cxx is None else cxx
    found = _COMPILER_IDS.get(cxx)
    if found is None:
        command = [*shlex.split(cxx), "--version"]
        proc = _run(command, "")
        text = (proc.stdout or proc.stderr or "").strip()
        if proc.returncode != 0 or not text:
            raise CompileError(
                f"C++ compiler {cxx!r} failed on --version (exit {proc.returncode}):\n"
                f"{proc.stderr.strip()}\nset CXX or config.cpu['cxx'] to a working compiler",
                log=proc.stderr, command=command)
        found = text.splitlines()[0].strip()
        _COMPILER_IDS[cxx] = found
    return found


def cxx_flags() -> list[str]:
    """``config.cpu["cxxflags"]`` plus ``-ffp-contract=off`` (``fma`` disabled) or ``=fast``.

    Example::

        >>> with config.override(disable=["fma"]):
        ...     cxx_flags()[-1]
        '-ffp-contract=off'
    """
    contract = "-ffp-contract=off" if config.is_disabled("fma") else "-ffp-contract=fast"
    return [*config.cpu["cxxflags"], contract]


def compile_cpp(source: str) -> str:
    """Compile ``source`` to a shared object (disk-cached) and return its path.

    Raises :class:`CompileError` with the compiler's diagnostics when it does not compile.

    Example::

        >>> so = compile_cpp('extern "C" void k(float* o) { o[0] = 1; }')
        >>> so.endswith(".so")
        True
    """
    cxx = config.cpu["cxx"]
    flags = cxx_flags()
    cid = compiler_id(cxx)

    def build(out: str) -> None:
        _build_shared_object(cxx, cid, flags, source, out)

    return cache.get_or_build_file("cpp", source, flags, cid, "so", build)


def _build_shared_object(cxx: str, cid: str, flags: list[str], source: str, out: str, count: bool = True) -> None:
    """Run the compiler; retry once without optional flags it rejected. ``count``: the run counts
    in the cache's compiler statistics (a fusion's kernel; not the CUDA launch shim). A source
    that begins with the C++ dialect's prelude includes it precompiled (``_prelude_header``);
    should that compile fail, the source as it is compiles again before any error is raised."""
    rejected = _REJECTED.setdefault(cxx, set())
    use = [f for f in flags if f not in rejected]
    use += [f for f in ("-shared", "-fPIC") if f not in use]
    with tempfile.TemporaryDirectory(prefix="graphfuser-cpp-") as tmp:
        src_path = os.path.join(tmp, "kernel.cpp")
        split = _prelude_header(cxx, cid, use, source)
        if split is not None:
            folder, rest = split
            with open(src_path, "w", encoding="utf-8") as f:
                f.write(f'#include "{PRELUDE_HEADER}"\n' + rest)
            proc = _compile([*shlex.split(cxx), *use, "-Winvalid-pch", f"-I{folder}", "-o", out, src_path],
                            source, count)
            if proc.returncode == 0:
                if f"{PRELUDE_HEADER}.gch" in proc.stderr:      # built, but this compiler would not load it
                    jit_log("kernel_cache", 1, f"{cid}: the precompiled prelude was not used:\n{proc.stderr.strip()}")
                elif proc.stderr.strip():
                    jit_log("compile", 2, f"{cid} diagnostics:\n{proc.stderr.strip()}")
                return
            jit_log("kernel_cache", 1, f"{cid}: a kernel failed to compile with the precompiled prelude; "
                                       "compiling its whole source")
        with open(src_path, "w", encoding="utf-8") as f:
            f.write(source)
        command = [*shlex.split(cxx), *use, "-o", out, src_path]
        proc = _compile(command, source, count)
        if proc.returncode != 0:
            blamed = [f for f in OPTIONAL_FLAGS if f in use and _blames(f, proc.stderr)]
            if blamed:
                jit_log("kernel_cache", 1, f"{cid}: rejected {' '.join(blamed)}; retrying without "
                                           f"{'it' if len(blamed) == 1 else 'them'}")
                rejected.update(blamed)
                command = [a for a in command if a not in blamed]
                proc = _compile(command, source, count)
        if proc.returncode != 0:
            stderr = proc.stderr.strip()
            raise CompileError(
                f"C++ kernel failed to compile ({cid}, exit {proc.returncode}):\n{stderr}\n"
                f"command: {shlex.join(command)}",
                source=source, log=proc.stderr, command=command)
    if proc.stderr.strip():
        jit_log("compile", 2, f"{cid} diagnostics:\n{proc.stderr.strip()}")


# The precompiled prelude. Every generated C++ source begins with the dialect's prelude (``math.h``
# and friends, the gf_* helpers: about 300 lines that C++'s <cmath> makes 24 MB of parsed state),
# which g++ spent three quarters of a kernel's compile parsing (0.24 of 0.31 s, -ftime-report,
# a pointwise kernel). The prelude, up to its last line (``codegen.dialects.PRELUDE_END``), goes
# once per compiler, flags and prelude text into ``<cache>/pch/<key>/gf_prelude.h`` with its
# precompiled ``gf_prelude.h.gch`` beside it (built under a lock, published by rename); each
# kernel's source then includes it instead. The shared object's cache key is the whole source's,
# as before. ``#pragma`` lines before the prelude (a reduction's turning contraction off, which
# must cover the prelude's helpers too) head the header and are repeated after its include: the
# machine code is the same as the whole source's (objdump, a softmax kernel: 0.29 s against
# 0.49 s). Sources with anything else before the prelude compile as they are, as do all sources
# under ``PYTORCH_NVFUSER_DISABLE=precompiled_prelude`` and with any compiler that cannot build
# the header (remembered per process). Measured on the test suite's C++ kernels (two of its
# files, 529 compiles): g++ time 235 -> 170 s.
PRELUDE_HEADER = "gf_prelude.h"
_PRELUDES: dict[str, str | None] = {}      # key -> folder holding the header and its .gch, or None
_PRELUDE_LOCK = threading.Lock()


def _prelude_header(cxx: str, cid: str, flags: list[str], source: str) -> tuple[str, str] | None:
    """(folder of the precompiled prelude, the source after its prelude), or None where the
    source compiles as it is."""
    if config.is_disabled("precompiled_prelude"):
        return None
    start, end = source.find("#include"), source.find(PRELUDE_END)
    if start < 0 or end < start:
        return None
    head = source[:start]
    if any(line.strip() and not line.startswith("#pragma ") for line in head.splitlines()):
        return None
    end += len(PRELUDE_END)
    prelude, rest = source[:end] + "\n", head + source[end:]
    pch_flags = [f for f in flags if f != "-shared"]
    key = hashlib.sha256("\0".join([cid, *pch_flags, prelude]).encode()).hexdigest()[:24]
    with _PRELUDE_LOCK:
        if key not in _PRELUDES:
            if config.is_disabled("compile_cache"):     # nothing on disk: a folder of this process's
                root = pathlib.Path(tempfile.mkdtemp(prefix="graphfuser-pch-"))
                cache._TEMP_DIRS.append(str(root))
            else:
                root = cache.cache_root() / "pch"
            _PRELUDES[key] = _build_prelude(cxx, cid, pch_flags, prelude, root / key)
        folder = _PRELUDES[key]
    return None if folder is None else (folder, rest)


def _build_prelude(cxx: str, cid: str, flags: list[str], prelude: str, folder) -> str | None:
    header, gch = folder / PRELUDE_HEADER, folder / (PRELUDE_HEADER + ".gch")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with cache._locked(folder / ".lock"):
            if gch.exists() and header.exists() and header.read_text(encoding="utf-8") == prelude:
                return str(folder)
            cache._atomic_write(header, prelude.encode())
            tmp = folder / f"{PRELUDE_HEADER}.gch.tmp-{os.getpid()}"
            command = [*shlex.split(cxx), *flags, "-x", "c++-header", str(header), "-o", str(tmp)]
            proc = _compile(command, prelude, count=False)
            if proc.returncode != 0:
                jit_log("kernel_cache", 1, f"{cid}: the prelude did not precompile (exit {proc.returncode}); "
                                           f"kernels include it as text\n{proc.stderr.strip()[:2000]}")
                return None
            os.replace(tmp, gch)
    except OSError as e:
        jit_log("kernel_cache", 1, f"{cid}: no precompiled prelude ({e}); kernels include it as text")
        return None
    return str(folder)


def _blames(flag: str, stderr: str) -> bool:
    text = stderr.lower()
    return any(word in text for word in _BLAME[flag])


def _compile(command: list[str], source: str, count: bool = True) -> subprocess.CompletedProcess:
    if count:
        cache.note_compile()
    jit_log("compile", 2, shlex.join(command))
    return _run(command, source)


def _run(command: list[str], source: str) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(command, capture_output=True, text=True, errors="replace",
                              timeout=COMPILE_TIMEOUT_S, stdin=subprocess.DEVNULL)
    except FileNotFoundError as e:
        raise CompileError(f"C++ compiler not found: {command[0]!r} ({e}); set CXX or "
                           f"config.cpu['cxx']", source=source, log=str(e), command=command) from e
    except (OSError, subprocess.TimeoutExpired) as e:
        raise CompileError(f"C++ compiler could not run: {e}", source=source, log=str(e),
                           command=command) from e


def load_library(so_path: str) -> ctypes.CDLL:
    """The ``ctypes.CDLL`` for ``so_path``, loaded once per process and kept loaded.

    Example::

        >>> load_library(so) is load_library(so)
        True
    """
    path = os.path.abspath(so_path)
    lib = _LIBS.get(path)
    if lib is None:
        lib = _LIBS[path] = ctypes.CDLL(path)
    return lib


class CpuKernel:
    """One exported function of a compiled kernel library, callable from Python.

    ``arg_kinds`` gives each argument's kind: ``"ptr"`` (a data pointer passed as an int, e.g.
    ``tensor.data_ptr()``), ``"i64"``, ``"i32"``, ``"f64"``, ``"f32"`` or ``"bool"``. ``fn`` is
    the bare ctypes function, for host programs that want to skip even this wrapper. With
    ``packed=True`` the library must hold ``packed_entries([name], arg_kinds)``: ``fn`` is then
    ``<name>_packed`` and takes the one bytes object ``pack(*args)`` makes.

    Example::

        >>> k = CpuKernel(so, "k", ["ptr", "ptr", "i64"])
        >>> k(a.data_ptr(), out.data_ptr(), a.numel())
    """

    __slots__ = ("so_path", "name", "arg_kinds", "fn", "pack")

    def __init__(self, so_path: str, name: str, arg_kinds: Sequence[str], packed: bool = False) -> None:
        bad = [k for k in arg_kinds if k not in ARG_CTYPES]
        if bad:
            raise ValueError(f"kernel {name}: unknown arg kinds {bad}; valid kinds are: "
                             f"{', '.join(ARG_CTYPES)}")
        lib = load_library(so_path)
        symbol = f"{name}_packed" if packed else name
        try:
            fn = lib[symbol]  # a fresh function object: argtypes are not shared with other kernels
        except AttributeError as e:
            raise AttributeError(f"{so_path} exports no function {symbol!r} "
                                 f"(declare it extern \"C\")") from e
        fn.argtypes = [ctypes.c_char_p] if packed else [ARG_CTYPES[k] for k in arg_kinds]
        fn.restype = None
        self.so_path = so_path
        self.name = name
        self.arg_kinds = list(arg_kinds)
        self.fn = fn
        self.pack = struct.Struct("=" + "".join(PACK_FORMAT[k] for k in arg_kinds)).pack if packed else None

    def __call__(self, *args: object) -> None:
        if self.pack is not None:
            self.fn(self.pack(*args))
        else:
            self.fn(*args)

    def __repr__(self) -> str:
        return f"CpuKernel({self.name}({', '.join(self.arg_kinds)}) from {self.so_path})"
