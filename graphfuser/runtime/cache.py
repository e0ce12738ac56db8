"""The on-disk cache of compiled kernels: shared objects (C++) and CUBINs (NVRTC).

Note [Kernel cache keys]
~~~~~~~~~~~~~~~~~~~~~~~~
Two layers stand between a fusion group and a compiler run.

1. The in-memory kernel cache (held by the executor, not here) maps a fusion group to a compiled,
   loaded kernel. Its key is

       (canonical fusion text, input specialization, target, codegen knobs)

   where the canonical fusion text is the printed subgraph with value names normalized; the input
   specialization is, per tensor input, the dtype, rank, broadcast (size-1) dims, contiguity /
   stride order and requires_grad that the guard checks; the target is the device type and, for
   CUDA, the device's compute capability; the codegen knobs are ``config.codegen_key()`` (``fma``,
   ``index_hoist``, ``predicate_elimination``). Sizes are never part of it: they are run-time
   kernel arguments, so a new batch size reuses the kernel (DESIGN.md, invariant 5).

2. The on-disk artifact cache (this module) maps the *rendered* kernel to a compiled artifact.
   Its key is ``artifact_key()``: the sha256 of

       (cache format version, artifact kind, source text, compiler flags,
        compiler identity and version, target)

   The flags are taken in order (order can change a compiler's behaviour). The target is the
   host's OS and machine (``linux-x86_64``) plus, when a flag asks for ``=native`` code
   (``-march=native``), a fingerprint of the host CPU, so a cache directory shared between hosts
   never hands out code for another CPU; for CUBINs the ``sm_XY`` is one of the flags. Anything
   that changes the bytes the compiler emits must be in one of these fields: a knob that changes
   generated code changes the source text, a knob that changes compilation (``fma`` ->
   ``-ffp-contract=off`` / ``--fmad=false``) changes the flags.

Invariants of the on-disk layer (DESIGN.md, invariant 7; each one has a test):

- Layout: ``<root>/v1/<kind>/<hh>/<hash>.<suffix>`` holds the artifact, next to it
  ``<hash>.json`` (metadata: format, key, kind, size and sha256 of the artifact, compiler,
  flags, build time), ``<hash>.src`` (the source, for people to read) and ``<hash>.lock``. ``hh``
  is the first two hex digits of the hash. The ``v1`` directory is the cache format version; a
  new format writes to ``v2`` and never reads old entries.
- Atomic writes: every file is written to a temporary name in the same directory and moved into
  place with ``os.replace``. Readers see an old complete file or a new complete file, never a
  partial one. The artifact is published before its metadata. Nothing is fsynced: a file that a
  crash left short or empty fails the verified read below and is rebuilt, so durability buys
  nothing here, and the four fsyncs an entry took cost a cold start dearly on a slow disk (one
  directory fsync measured 0.18 s on the GPU host, for each of a Llama's kernels).
- Verified reads: every read from disk checks the artifact against its metadata (format, key,
  size, sha256). A missing, truncated or overwritten artifact, or missing or unreadable metadata,
  counts as corrupt: it is logged, counted in ``STATS["corrupt"]`` and rebuilt, never trusted.
- Concurrency: a miss takes a per-key ``fcntl.flock`` on ``<hash>.lock``, looks again, and only
  then builds; a second process compiling the same kernel waits and then reuses the first one's
  artifact. Where no lock can be taken, both processes build and both publish atomically: any
  artifact at the final path is a complete build of the same key, so the result is still right,
  only the work is done twice.
- Loaded libraries are never modified in place: a rebuild replaces the path with a new file
  (a new inode), so a process that already mapped the old one keeps running it. ``clear()``
  unlinks files, which is also safe for mapped libraries on POSIX.
- ``PYTORCH_NVFUSER_DISABLE=compile_cache`` bypasses the disk: every call builds (files go to a
  private temporary directory removed at exit).

The root is ``config.cache_dir``, else ``$GRAPHFUSER_CACHE_DIR``, else
``$XDG_CACHE_HOME/graphfuser`` (``~/.cache/graphfuser``), resolved at every call.

Example::

    >>> from graphfuser.runtime import cache
    >>> blob = cache.get_or_build_bytes("cubin", src, flags, "nvrtc-12.4", lambda: nvrtc(src))
    >>> cache.STATS["disk_hits"], cache.STATS["disk_misses"]
    (0, 1)
"""
from __future__ import annotations

import atexit
import contextlib
import hashlib
import json
import os
import pathlib
import platform
import re
import secrets
import shutil
import sys
import tempfile
import threading
import time
from typing import Callable, Iterator

from graphfuser.config import config
from graphfuser.log import jit_log

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX: no locks, still correct (see the Note)
    fcntl = None  # type: ignore[assignment]

FORMAT_VERSION = 1

# Process-wide counters. "compiles" counts compiler invocations (builders call note_compile()).
STATS: dict[str, int] = {"compiles": 0, "disk_hits": 0, "disk_misses": 0, "corrupt": 0}

_NAME_RE = re.compile(r"^[A-Za-z0-9_-]+$")
_LOG = "kernel_cache"
_TEMP_DIRS: list[str] = []
_HOST_TARGET: dict[bool, str] = {}


# -- keys and paths ------------------------------------------------------------------------------
def cache_root() -> pathlib.Path:
    """The cache root: ``config.cache_dir``, ``$GRAPHFUSER_CACHE_DIR`` or ``$XDG_CACHE_HOME/graphfuser``.

    Example::

        >>> with config.override(cache_dir="/tmp/gf"):
        ...     cache_root()
        PosixPath('/tmp/gf')
    """
    root = config.cache_dir or os.environ.get("GRAPHFUSER_CACHE_DIR")
    if not root:
        xdg = os.environ.get("XDG_CACHE_HOME", "")
        base = xdg if os.path.isabs(xdg) else os.path.join(os.path.expanduser("~"), ".cache")
        root = os.path.join(base, "graphfuser")
    return pathlib.Path(os.path.expanduser(str(root))).absolute()


def host_target(native: bool = False) -> str:
    """The host part of the key: ``"linux-x86_64"``, plus a CPU fingerprint when ``native``.

    Example::

        >>> host_target()
        'linux-x86_64'
    """
    target = _HOST_TARGET.get(native)
    if target is None:
        target = f"{sys.platform}-{platform.machine() or 'unknown'}"
        if native:
            target += "-cpu-" + hashlib.sha256(_cpu_fingerprint().encode()).hexdigest()[:16]
        _HOST_TARGET[native] = target
    return target


def _cpu_fingerprint() -> str:
    """Vendor, model and feature flags of the first CPU (what ``-march=native`` depends on)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            first = f.read().split("\n\n", 1)[0]
    except OSError:
        return platform.processor() or platform.machine()
    wanted = ("vendor_id", "cpu family", "model", "model name", "flags", "CPU implementer",
              "CPU architecture", "CPU variant", "CPU part", "Features", "isa", "uarch")
    keep = []
    for line in first.splitlines():
        name, _, value = line.partition(":")
        if name.strip() in wanted:
            keep.append(f"{name.strip()}={value.strip()}")
    return "\n".join(keep) or platform.processor() or platform.machine()


def artifact_key(kind: str, source: str, flags: list[str], compiler_id: str,
                 target: str | None = None) -> str:
    """The hex sha256 naming an artifact on disk (see Note [Kernel cache keys]).

    ``target`` defaults to ``host_target()``, fingerprinting the CPU when a flag ends in
    ``=native``.

    Example::

        >>> len(artifact_key("cpp", "void k() {}", ["-O3"], "g++ (Debian 12.2.0) 12.2.0"))
        64
    """
    if target is None:
        target = host_target(any(f.endswith("=native") for f in flags))
    text = json.dumps([FORMAT_VERSION, kind, source, [str(f) for f in flags], compiler_id, target],
                      ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


class _Entry:
    """The files of one cache entry."""

    __slots__ = ("key", "dir", "payload", "meta", "src", "lock")

    def __init__(self, root: pathlib.Path, kind: str, key: str, suffix: str) -> None:
        self.key = key
        self.dir = root / f"v{FORMAT_VERSION}" / kind / key[:2]
        self.payload = self.dir / f"{key}.{suffix}"
        self.meta = self.dir / f"{key}.json"
        self.src = self.dir / f"{key}.src"
        self.lock = self.dir / f"{key}.lock"


def _check_name(what: str, value: str) -> None:
    if not _NAME_RE.match(value):
        raise ValueError(f"cache {what} {value!r} must be letters, digits, '_' or '-'")


# -- public API ----------------------------------------------------------------------------------
_STATS_LOCK = threading.Lock()


def _count(name: str) -> None:
    """``STATS[name] += 1`` (kernels compile on several threads at once)."""
    with _STATS_LOCK:
        STATS[name] += 1


def note_compile() -> None:
    """Count one compiler invocation; builders call it each time they run a compiler.

    Example::

        >>> note_compile(); STATS["compiles"]
        1
    """
    _count("compiles")


def get_or_build_file(kind: str, source: str, flags: list[str], compiler_id: str, suffix: str,
                      build: Callable[[str], None]) -> str:
    """The path of a verified artifact file for this key, building it on a miss.

    ``build(tmp_out_path)`` must write the artifact at ``tmp_out_path`` (a temporary name in the
    entry's directory); it is then published atomically. The returned path stays valid (a rebuild
    replaces it with a new file, never modifies it), so it can be handed to ``ctypes.CDLL``.

    Example::

        >>> so = get_or_build_file("cpp", src, flags, compiler_id(), "so",
        ...                        lambda out: run([cxx, *flags, "-o", out, src_file]))
    """
    _check_name("kind", kind)
    suffix = suffix.lstrip(".")
    _check_name("suffix", suffix)
    if config.is_disabled("compile_cache"):
        return _build_file_uncached(kind, source, suffix, build)

    def make(tmp: pathlib.Path) -> None:
        build(str(tmp))
        if not tmp.is_file():
            raise RuntimeError(f"the {kind} builder did not write its output at {tmp}")

    found = _get_or_build(kind, source, flags, compiler_id, suffix, make)
    if found is None:  # the cache directory is not writable
        return _build_file_uncached(kind, source, suffix, build)
    return str(found[0].payload)


def get_or_build_bytes(kind: str, source: str, flags: list[str], compiler_id: str,
                       build: Callable[[], bytes]) -> bytes:
    """The verified artifact bytes for this key (e.g. a CUBIN), calling ``build()`` on a miss.

    Example::

        >>> cubin = get_or_build_bytes("cubin", src, ["--gpu-architecture=sm_90"], "nvrtc-12.4",
        ...                            lambda: compile_with_nvrtc(src))
    """
    _check_name("kind", kind)
    if config.is_disabled("compile_cache"):
        return _timed_build(kind, "(cache disabled)", build)

    def make(tmp: pathlib.Path) -> None:
        data = build()
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f"the {kind} builder returned {type(data).__name__}, not bytes")
        _write_new(tmp, bytes(data))

    found = _get_or_build(kind, source, flags, compiler_id, kind, make)
    if found is None:  # the cache directory is not writable
        return _timed_build(kind, "(cache not writable)", build)
    return found[1]


def clear(kind: str | None = None) -> int:
    """Remove the cache entries of ``kind`` (all kinds when None); returns how many were removed.

    Loaded shared objects keep working (their files are unlinked, never modified).

    Example::

        >>> clear("cpp")
        3
    """
    base = cache_root() / f"v{FORMAT_VERSION}"
    if kind is not None:
        _check_name("kind", kind)
        kinds = [kind]
    else:
        kinds = [p.name for p in base.iterdir() if p.is_dir()] if base.is_dir() else []
    removed = 0
    for name in kinds:
        folder = base / name
        if not folder.is_dir():
            continue
        keys = {p.name.split(".", 1)[0] for p in folder.glob("*/*")
                if p.is_file() and ".tmp-" not in p.name and p.suffix not in (".lock", ".src")}
        removed += len(keys)
        shutil.rmtree(folder, ignore_errors=True)
    jit_log(_LOG, 1, f"cleared {removed} entries ({kind or 'all kinds'}) under {base}")
    return removed


def entries(kind: str | None = None) -> list[dict]:
    """The metadata of every entry on disk (unverified), each with its ``"path"``; for tools.

    Example::

        >>> [e["kind"] for e in entries()]
        ['cpp', 'cubin']
    """
    base = cache_root() / f"v{FORMAT_VERSION}"
    pattern = f"{kind}/*/*.json" if kind else "*/*/*.json"
    found = []
    for meta_path in sorted(base.glob(pattern)) if base.is_dir() else []:
        try:
            meta = json.loads(meta_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(meta, dict):
            meta["path"] = str(meta_path.with_name(f"{meta_path.stem}.{meta.get('suffix', '')}"))
            found.append(meta)
    return found


# -- the miss path -------------------------------------------------------------------------------
def _get_or_build(kind: str, source: str, flags: list[str], compiler_id: str, suffix: str,
                  make: Callable[[pathlib.Path], None]) -> tuple[_Entry, bytes] | None:
    """The entry and its verified bytes, built on a miss; None when the directory is not writable."""
    key = artifact_key(kind, source, flags, compiler_id)
    entry = _Entry(cache_root(), kind, key, suffix)
    data, _ = _verify(entry, kind)
    if data is not None:
        _count("disk_hits")
        jit_log(_LOG, 2, f"disk hit: {kind} {key[:16]} ({entry.payload})")
        return entry, data
    try:
        entry.dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        jit_log(_LOG, 1, f"cache directory {entry.dir} is not usable ({e}); building uncached")
        return None
    with _locked(entry.lock):
        data, problem = _verify(entry, kind)
        if data is not None:  # another process built it while we waited for the lock
            _count("disk_hits")
            jit_log(_LOG, 2, f"disk hit after waiting for the lock: {kind} {key[:16]}")
        else:
            if problem is not None:
                _count("corrupt")
                jit_log(_LOG, 1, f"corrupt entry {entry.payload}: {problem}; rebuilding")
                with contextlib.suppress(OSError):
                    entry.meta.unlink()
            _count("disk_misses")
            jit_log(_LOG, 1, f"disk miss: {kind} {key[:16]}; building")
            data = _build_and_publish(entry, kind, source, flags, compiler_id, suffix, make)
    return entry, data


def _verify(entry: _Entry, kind: str) -> tuple[bytes | None, str | None]:
    """``(payload, None)`` if the entry verifies, ``(None, None)`` if absent, else ``(None, why)``."""
    try:
        meta_bytes: bytes | None = entry.meta.read_bytes()
    except FileNotFoundError:
        meta_bytes = None
    except OSError as e:
        return None, f"metadata unreadable: {e}"
    try:
        data: bytes | None = entry.payload.read_bytes()
    except FileNotFoundError:
        data = None
    except OSError as e:
        return None, f"artifact unreadable: {e}"
    if meta_bytes is None and data is None:
        return None, None
    if meta_bytes is None:
        return None, "metadata missing (interrupted write?)"
    if data is None:
        return None, "artifact missing"
    try:
        meta = json.loads(meta_bytes)
    except ValueError:
        return None, "metadata is not valid JSON"
    if not isinstance(meta, dict):
        return None, "metadata is not a JSON object"
    if meta.get("format") != FORMAT_VERSION or meta.get("key") != entry.key or meta.get("kind") != kind:
        return None, "metadata names another format, key or kind"
    if meta.get("size") != len(data):
        return None, f"artifact is {len(data)} bytes, metadata says {meta.get('size')}"
    if meta.get("sha256") != hashlib.sha256(data).hexdigest():
        return None, "artifact sha256 does not match its metadata"
    return data, None


def _build_and_publish(entry: _Entry, kind: str, source: str, flags: list[str], compiler_id: str,
                       suffix: str, make: Callable[[pathlib.Path], None]) -> bytes:
    """Build into a temporary name, publish artifact, then source and metadata, atomically."""
    tmp = entry.dir / f"{entry.key}.tmp-{os.getpid()}-{secrets.token_hex(4)}.{suffix}"
    start = time.perf_counter()
    try:
        make(tmp)
        data = tmp.read_bytes()
        os.replace(tmp, entry.payload)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    seconds = time.perf_counter() - start
    _atomic_write(entry.src, source.encode("utf-8", "surrogatepass"))
    meta = {
        "format": FORMAT_VERSION, "key": entry.key, "kind": kind, "suffix": suffix,
        "size": len(data), "sha256": hashlib.sha256(data).hexdigest(),
        "compiler": compiler_id, "flags": list(flags), "target": host_target(
            any(f.endswith("=native") for f in flags)),
        "build_seconds": round(seconds, 4), "created": time.time(), "pid": os.getpid(),
    }
    _atomic_write(entry.meta, json.dumps(meta, indent=1).encode())
    jit_log(_LOG, 1, f"built {kind} {entry.key[:16]} in {seconds * 1e3:.1f} ms "
                     f"({len(data)} bytes) -> {entry.payload}")
    return data


def _timed_build(kind: str, why: str, build: Callable[[], bytes]) -> bytes:
    start = time.perf_counter()
    data = bytes(build())
    jit_log(_LOG, 1, f"built {kind} {why} in {(time.perf_counter() - start) * 1e3:.1f} ms")
    return data


def _build_file_uncached(kind: str, source: str, suffix: str,
                         build: Callable[[str], None]) -> str:
    """Build into a private temporary directory (removed at exit; the file is never reused)."""
    folder = tempfile.mkdtemp(prefix=f"graphfuser-{kind}-")
    _TEMP_DIRS.append(folder)
    with open(os.path.join(folder, f"{kind}.src"), "w", encoding="utf-8") as f:
        f.write(source)
    out = os.path.join(folder, f"{kind}.{suffix}")
    start = time.perf_counter()
    build(out)
    if not os.path.isfile(out):
        raise RuntimeError(f"the {kind} builder did not write its output at {out}")
    jit_log(_LOG, 1, f"built {kind} uncached in {(time.perf_counter() - start) * 1e3:.1f} ms "
                     f"-> {out}")
    return out


@atexit.register
def _remove_temp_dirs() -> None:
    for folder in _TEMP_DIRS:
        shutil.rmtree(folder, ignore_errors=True)


# -- files ---------------------------------------------------------------------------------------
@contextlib.contextmanager
def _locked(path: pathlib.Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``path``; proceed unlocked where locking is unavailable."""
    fd = -1
    if fcntl is not None:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError as e:
            jit_log(_LOG, 1, f"cannot lock {path} ({e}); building without a lock")
            if fd >= 0:
                os.close(fd)
                fd = -1
    try:
        yield
    finally:
        if fd >= 0:
            os.close(fd)  # releases the lock


def _write_new(path: pathlib.Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)


def _atomic_write(path: pathlib.Path, data: bytes) -> None:
    """Write ``data`` to ``path`` via a temporary file in the same directory + ``os.replace``."""
    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}")
    try:
        _write_new(tmp, data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
