"""The on-disk artifact cache: keys, layout, verification, corruption, locking, bypass."""
from __future__ import annotations

import json
import os
import pathlib
import threading
import time
import uuid

import pytest

from graphfuser.config import config
from graphfuser.runtime import cache


def _unique(tag: str = "") -> str:
    return f"// {tag} {uuid.uuid4().hex}\nint x;\n"


def _stats() -> dict[str, int]:
    return dict(cache.STATS)


def _delta(before: dict[str, int]) -> dict[str, int]:
    return {k: cache.STATS[k] - before[k] for k in cache.STATS}


class Builder:
    """A fake compiler: counts calls and returns fixed bytes."""

    def __init__(self, payload: bytes = b"\x7fCUBIN" + bytes(range(256)), delay: float = 0.0):
        self.payload = payload
        self.delay = delay
        self.calls = 0
        self._lock = threading.Lock()

    def __call__(self) -> bytes:
        with self._lock:
            self.calls += 1
        cache.note_compile()
        if self.delay:
            time.sleep(self.delay)
        return self.payload

    def to_file(self, out: str) -> None:
        pathlib.Path(out).write_bytes(self())


# -- root and keys -------------------------------------------------------------------------------
def test_cache_root_precedence(tmp_path, monkeypatch):
    with config.override(cache_dir=str(tmp_path / "from-config")):
        assert cache.cache_root() == tmp_path / "from-config"
    with config.override(cache_dir=None):
        monkeypatch.setenv("GRAPHFUSER_CACHE_DIR", str(tmp_path / "from-env"))
        assert cache.cache_root() == tmp_path / "from-env"
        monkeypatch.delenv("GRAPHFUSER_CACHE_DIR")
        monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
        assert cache.cache_root() == tmp_path / "xdg" / "graphfuser"
        monkeypatch.delenv("XDG_CACHE_HOME")
        monkeypatch.setenv("HOME", str(tmp_path / "home"))
        assert cache.cache_root() == tmp_path / "home" / ".cache" / "graphfuser"


def test_artifact_key_covers_every_field():
    base = ("cpp", "void k() {}", ["-O3", "-fPIC"], "g++ 12.2.0")
    key = cache.artifact_key(*base)
    assert len(key) == 64 and int(key, 16) >= 0
    assert cache.artifact_key(*base) == key  # deterministic
    variants = [
        ("cubin", *base[1:]),
        (base[0], "void k() { }", *base[2:]),
        (base[0], base[1], ["-O2", "-fPIC"], base[3]),
        (base[0], base[1], ["-fPIC", "-O3"], base[3]),  # flag order matters
        (*base[:3], "g++ 13.1.0"),
    ]
    keys = {cache.artifact_key(*v) for v in variants}
    assert key not in keys and len(keys) == len(variants)
    assert cache.artifact_key(*base, target="linux-aarch64") != key


def test_native_flags_fingerprint_the_cpu():
    plain, native = cache.host_target(False), cache.host_target(True)
    assert native.startswith(plain + "-cpu-")
    flags = ["-O3", "-march=native"]
    assert cache.artifact_key("cpp", "s", flags, "c") == cache.artifact_key(
        "cpp", "s", flags, "c", target=native)


# -- hits, misses, layout ------------------------------------------------------------------------
def test_miss_then_hit_and_layout(tmp_path):
    build = Builder()
    src = _unique("layout")
    with config.override(cache_dir=str(tmp_path)):
        before = _stats()
        assert cache.get_or_build_bytes("cubin", src, ["-arch=sm_90"], "nvrtc-12.4", build) == build.payload
        assert _delta(before) == {"compiles": 1, "disk_hits": 0, "disk_misses": 1, "corrupt": 0}
        assert cache.get_or_build_bytes("cubin", src, ["-arch=sm_90"], "nvrtc-12.4", build) == build.payload
        assert _delta(before) == {"compiles": 1, "disk_hits": 1, "disk_misses": 1, "corrupt": 0}
        assert build.calls == 1
        # Other flags: another entry.
        cache.get_or_build_bytes("cubin", src, ["-arch=sm_80"], "nvrtc-12.4", build)
        assert build.calls == 2

    key = cache.artifact_key("cubin", src, ["-arch=sm_90"], "nvrtc-12.4")
    folder = tmp_path / "v1" / "cubin" / key[:2]
    assert (folder / f"{key}.cubin").read_bytes() == build.payload
    assert (folder / f"{key}.src").read_text() == src
    meta = json.loads((folder / f"{key}.json").read_text())
    assert meta["key"] == key and meta["size"] == len(build.payload) and meta["format"] == 1
    assert not [p for p in folder.iterdir() if ".tmp-" in p.name]


def test_file_artifacts_hit_and_stay_put(tmp_path):
    build = Builder()
    src = _unique("file")
    with config.override(cache_dir=str(tmp_path)):
        path = cache.get_or_build_file("cpp", src, ["-O3"], "g++", "so", build.to_file)
        again = cache.get_or_build_file("cpp", src, ["-O3"], "g++", ".so", build.to_file)
    assert path == again and path.endswith(".so") and build.calls == 1
    assert pathlib.Path(path).is_relative_to(tmp_path / "v1" / "cpp")
    assert pathlib.Path(path).read_bytes() == build.payload


def test_kind_and_suffix_are_checked(tmp_path):
    with config.override(cache_dir=str(tmp_path)), pytest.raises(ValueError):
        cache.get_or_build_bytes("../evil", "s", [], "c", Builder())
    with config.override(cache_dir=str(tmp_path)), pytest.raises(ValueError):
        cache.get_or_build_file("cpp", "s", [], "c", "so/x", Builder().to_file)


# -- corruption ----------------------------------------------------------------------------------
@pytest.mark.parametrize("damage", ["truncate", "overwrite", "delete_meta", "garble_meta", "delete_payload"])
def test_corrupt_entry_is_detected_and_rebuilt(tmp_path, damage):
    build = Builder()
    src = _unique(damage)
    with config.override(cache_dir=str(tmp_path)):
        cache.get_or_build_bytes("cubin", src, [], "nvrtc", build)
        key = cache.artifact_key("cubin", src, [], "nvrtc")
        payload = tmp_path / "v1" / "cubin" / key[:2] / f"{key}.cubin"
        meta = payload.with_suffix(".json")
        if damage == "truncate":
            payload.write_bytes(build.payload[:10])
        elif damage == "overwrite":  # same size, other bytes
            payload.write_bytes(bytes(len(build.payload)))
        elif damage == "delete_meta":
            meta.unlink()
        elif damage == "garble_meta":
            meta.write_text("{not json")
        else:
            payload.unlink()
        before = _stats()
        assert cache.get_or_build_bytes("cubin", src, [], "nvrtc", build) == build.payload
        assert _delta(before) == {"compiles": 1, "disk_hits": 0, "disk_misses": 1, "corrupt": 1}
        assert payload.read_bytes() == build.payload
        before = _stats()
        assert cache.get_or_build_bytes("cubin", src, [], "nvrtc", build) == build.payload
        assert _delta(before)["disk_hits"] == 1 and build.calls == 2


def test_corrupt_file_artifact_is_replaced_not_modified(tmp_path):
    build = Builder()
    src = _unique("inode")
    with config.override(cache_dir=str(tmp_path)):
        path = cache.get_or_build_file("cpp", src, [], "g++", "so", build.to_file)
        with open(path, "r+b") as f:
            f.truncate(5)
        inode = os.stat(path).st_ino
        before = _stats()
        assert cache.get_or_build_file("cpp", src, [], "g++", "so", build.to_file) == path
        assert _delta(before)["corrupt"] == 1
    assert pathlib.Path(path).read_bytes() == build.payload
    assert os.stat(path).st_ino != inode  # a new file: a process that mapped the old one is safe


# -- failures ------------------------------------------------------------------------------------
def test_failed_build_publishes_nothing(tmp_path):
    src = _unique("fail")

    def broken() -> bytes:
        raise RuntimeError("compiler exploded")

    def no_output(out: str) -> None:
        pass

    with config.override(cache_dir=str(tmp_path)):
        with pytest.raises(RuntimeError, match="exploded"):
            cache.get_or_build_bytes("cubin", src, [], "nvrtc", broken)
        with pytest.raises(RuntimeError, match="did not write"):
            cache.get_or_build_file("cpp", src, [], "g++", "so", no_output)
        leftovers = [p.name for p in tmp_path.rglob("*") if p.is_file() and p.suffix != ".lock"]
        assert leftovers == []
        before = _stats()
        build = Builder()
        assert cache.get_or_build_bytes("cubin", src, [], "nvrtc", build) == build.payload
        assert _delta(before)["corrupt"] == 0 and _delta(before)["disk_misses"] == 1


def test_unwritable_root_builds_uncached(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    build = Builder()
    with config.override(cache_dir=str(blocker / "cache")):
        assert cache.get_or_build_bytes("cubin", _unique(), [], "nvrtc", build) == build.payload
        path = cache.get_or_build_file("cpp", _unique(), [], "g++", "so", build.to_file)
    assert pathlib.Path(path).read_bytes() == build.payload and build.calls == 2


# -- bypass and clear ----------------------------------------------------------------------------
def test_compile_cache_disabled_bypasses_disk(tmp_path):
    build = Builder()
    src = _unique("disabled")
    with config.override(cache_dir=str(tmp_path), disable=["compile_cache"]):
        before = _stats()
        for _ in range(2):
            assert cache.get_or_build_bytes("cubin", src, [], "nvrtc", build) == build.payload
        paths = {cache.get_or_build_file("cpp", src, [], "g++", "so", build.to_file) for _ in range(2)}
        assert build.calls == 4 and len(paths) == 2
        assert _delta(before) == {"compiles": 4, "disk_hits": 0, "disk_misses": 0, "corrupt": 0}
    assert not any(tmp_path.iterdir())
    assert all(pathlib.Path(p).read_bytes() == build.payload for p in paths)


def test_clear(tmp_path):
    build = Builder()
    with config.override(cache_dir=str(tmp_path)):
        for i in range(3):
            cache.get_or_build_bytes("cubin", _unique(str(i)), [], "nvrtc", build)
        cache.get_or_build_file("cpp", _unique(), [], "g++", "so", build.to_file)
        assert {e["kind"] for e in cache.entries()} == {"cubin", "cpp"}
        assert cache.clear("cubin") == 3
        assert [e["kind"] for e in cache.entries()] == ["cpp"]
        assert cache.clear() == 1
        assert cache.entries() == [] and cache.clear() == 0


# -- concurrency ---------------------------------------------------------------------------------
def _race(n: int, fn) -> list:
    results: list = [None] * n
    errors: list = []
    barrier = threading.Barrier(n)

    def run(i: int) -> None:
        barrier.wait()
        try:
            results[i] = fn()
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    return results


def test_concurrent_miss_builds_once_with_the_lock(tmp_path):
    build = Builder(delay=0.2)
    src = _unique("race")
    with config.override(cache_dir=str(tmp_path)):
        results = _race(3, lambda: cache.get_or_build_bytes("cubin", src, [], "nvrtc", build))
    assert results == [build.payload] * 3
    assert build.calls == 1  # the others waited on the flock, then hit


def test_concurrent_miss_without_a_lock_is_still_correct(tmp_path, monkeypatch):
    monkeypatch.setattr(cache, "fcntl", None)
    build = Builder(delay=0.1)
    src = _unique("nolock")
    with config.override(cache_dir=str(tmp_path)):
        results = _race(3, lambda: cache.get_or_build_bytes("cubin", src, [], "nvrtc", build))
        assert results == [build.payload] * 3
        before = _stats()
        assert cache.get_or_build_bytes("cubin", src, [], "nvrtc", build) == build.payload
        assert _delta(before) == {"compiles": 0, "disk_hits": 1, "disk_misses": 0, "corrupt": 0}
