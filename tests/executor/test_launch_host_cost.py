"""The host work of a fused call: what the generated guard and launcher read, and that it stays
correct when what they no longer re-read changes between calls."""
import ctypes
import dataclasses

import pytest
import torch

import graphfuser
from graphfuser.executor import compiled, guards
from graphfuser.executor.compiled import CompiledGroup, _launcher_source
from graphfuser.ir import parse_graph
from graphfuser.ir.types import TensorType
from tests.helpers import check

# x is read at two strides (a 3-D permuted input), y at one
PERMUTED = '''graph(%x : Float(4, 6, 8, strides=[1, 4, 24], requires_grad=0, device=cpu),
      %y : Float(4, 6, 8, strides=[48, 8, 1], requires_grad=0, device=cpu)):
  %one : int = prim::Constant[value=1]()
  %a : Float(4, 6, 8, strides=[48, 8, 1], requires_grad=0, device=cpu) = aten::add(%x, %y, %one)
  %b : Float(4, 6, 8, strides=[48, 8, 1], requires_grad=0, device=cpu) = aten::sigmoid(%a)
  return (%b)'''


def _fn(x, y):
    return torch.sigmoid(x + y) * y


def test_strides_read_once_per_tensor():
    cg = CompiledGroup(parse_graph(PERMUTED), "cpu", torch.device("cpu"), "k_perm")
    src = _launcher_source(cg)
    for name in ("x0", "x1", "o0"):
        single = src.count(f"{name}.stride(")
        whole = src.count(f"{name}.stride()")
        assert whole <= 1 and (whole == 0 or single == whole), src
    assert "x0.stride()" in src, src      # read at two strides: asked once, indexed twice


def test_cpu_launcher_calls_the_ctypes_function():
    sf = check(_fn, torch.randn(8, 6, 4).permute(2, 1, 0), torch.randn(4, 6, 8))
    launchers = [r for r in sf._runners.values() if hasattr(r, "namespace")]
    assert launchers
    for r in launchers:
        assert isinstance(r.namespace["_fn"], ctypes._CFuncPtr)


@pytest.mark.parametrize("layout", ["dense", "permuted", "sliced", "expanded"])
def test_changed_layout_between_calls_matches_eager(layout):
    """Strides are read per call (not cached from the guard's profile): a different layout after
    warm-up either misses the guard or runs the kernel with its own strides."""
    f = graphfuser.script(_fn)
    y = torch.randn(4, 6, 8)
    for _ in range(3):
        f(torch.randn(4, 6, 8), y)
    x = {"dense": torch.randn(4, 6, 8), "permuted": torch.randn(8, 6, 4).permute(2, 1, 0),
         "sliced": torch.randn(4, 6, 16)[..., ::2], "expanded": torch.randn(1, 6, 8).expand(4, 6, 8)}[layout]
    for _ in range(3):
        torch.testing.assert_close(f(x, y), _fn(x, y))


@pytest.mark.parametrize("name", ["broadcast", "strided_inner"])
def test_magic_pairs_looked_up_before_computed(name):
    from tests.codegen.test_cuda_launcher import GROUPS

    g = GROUPS[name]
    cg = CompiledGroup(parse_graph(g), "cuda", torch.device("cuda:0"), "k_magic")
    src = _launcher_source(cg)
    divs = {d for ds in cg.divisors for d in ds}
    assert divs, "a group with a divided extent"
    for d in divs:
        assert f"_MG({d}) or _magic({d})" in src, src
    # the cache the launcher reads is the one magic_divisor fills
    m = compiled.magic_divisor(12345)
    assert compiled._MAGIC.get(12345) == m


def _cuda_type(index):
    return dataclasses.replace(TensorType.of(torch.empty(4, 8)), device=torch.device("cuda", index))


@pytest.mark.parametrize("single", [True, False])
def test_guard_device_check(monkeypatch, single):
    """With one visible device a CUDA tensor is on it: the guard asks is_cuda only."""
    monkeypatch.setattr(guards, "single_device", lambda: single)
    src, _ = guards.guard_source([_cuda_type(0)], 2)
    assert "x0.is_cuda" in src
    assert ("get_device" in src) is (not single), src


def test_launch_source_device_check(monkeypatch):
    """The driver's launch skips the current-device check only with one visible device."""
    from graphfuser.runtime import cuda_driver

    template = cuda_driver._LAUNCH_TEMPLATE
    assert "{device_check}" in template
    for single in (True, False):
        monkeypatch.setattr(cuda_driver, "single_device", lambda s=single: s)
        k = object.__new__(cuda_driver.CudaKernel)
        k.name, k.cooperative, k.device_index, k.arg_kinds = "k", False, 0, ("ptr", "i32")
        k.api, k.func = "bindings", None
        k.slots, k.params_address = ctypes.create_string_buffer(16), 0
        import struct

        k._struct = struct.Struct("@Qi")
        try:
            k._build_launch()
        except (ImportError, AttributeError):      # no CUDA build here: the source is what is checked
            pass
        src = getattr(k, "launch_source", None)
        if src is None:
            pytest.skip("cuda-bindings not importable")
        compile(src, "<launch>", "exec")
        assert ("_get_device()" in src) is (not single), src


@pytest.mark.parametrize("cooperative", [False, True])
def test_ctypes_launch_packs_slots_and_passes_the_prebuilt_array(monkeypatch, cooperative):
    """The ctypes launch (a stand-in driver function here) gets the function handle as an int,
    the prebuilt ``void*[]`` and the argument values packed into their slots; a non-zero result
    raises LaunchError naming the kernel."""
    import struct

    from graphfuser.runtime import cuda_driver
    from graphfuser.runtime.errors import LaunchError

    calls = []

    def fake(*args):
        calls.append(args)
        return 0 if args[4] <= 1024 else 1      # CUDA_ERROR_INVALID_VALUE for a too-large block

    monkeypatch.setattr(cuda_driver, "driver_launchers", lambda: (fake, fake))
    monkeypatch.setattr(cuda_driver, "single_device", lambda: True)
    monkeypatch.setattr(cuda_driver, "error_string", lambda err: f"code {int(err)}")
    kinds = ("ptr", "i32", "i64", "f32", "f64")
    k = object.__new__(cuda_driver.CudaKernel)
    k.name, k.cooperative, k.device_index, k.arg_kinds = "k_fake", cooperative, 0, kinds
    k.api, k.func = "ctypes", 0xABC
    fmt = "@" + "".join(cuda_driver._STRUCT_CODES[x] for x in kinds)
    k._struct = struct.Struct(fmt)
    k.slots = ctypes.create_string_buffer(k._struct.size)
    k.params_address = 0x5000
    k._raise = cuda_driver.CudaKernel._raise.__get__(k)
    k._launch_elsewhere = None
    launch = k._build_launch()
    assert k.launch_api == "ctypes" and ")[0]" not in k.launch_source
    launch((3, 2, 1), (128, 1, 1), 0x77, 0xDEAD0, -5, 1 << 40, 1.5, -2.25, shared_mem=64)
    (args,) = calls
    assert args[0] == 0xABC and args[1:7] == (3, 2, 1, 128, 1, 1) and args[7:10] == (64, 0x77, 0x5000)
    assert len(args) == (10 if cooperative else 11)
    assert k._struct.unpack(k.slots.raw[:k._struct.size]) == (0xDEAD0, -5, 1 << 40, 1.5, -2.25)
    with pytest.raises(LaunchError, match="k_fake.*code 1"):
        launch((1, 1, 1), (4096, 1, 1), 0, 1, 2, 3, 4.0, 5.0)


@pytest.mark.parametrize("layout", ["dense", "permuted", "empty"])
def test_outputs_allocated_with_eagers_strides(layout):
    """Default-order outputs come from torch.empty (cheaper than empty_strided), others from
    empty_strided; either way they have eager's sizes and strides, empty dims included."""
    x = {"dense": torch.randn(4, 6, 8), "permuted": torch.randn(8, 6, 4).permute(2, 1, 0),
         "empty": torch.randn(4, 0, 8)}[layout]
    y = torch.randn(4, 6 if layout != "empty" else 0, 8)
    sf = check(_fn, x, y)
    src = "".join(getattr(r.compiled, "launcher_source", "") for r in sf._runners.values()
                  if hasattr(r, "compiled"))
    if layout == "dense":
        assert "_empty_c(" in src and "_empty((" not in src and "_empty_c((" not in src, src
    if layout == "permuted":
        assert "_empty((" in src, src
    for _ in range(2):
        got, want = sf(x, y), _fn(x, y)
        assert got.shape == want.shape and got.stride() == want.stride()
        torch.testing.assert_close(got, want)


def _norm_relu(x, w, b):
    return torch.nn.functional.layer_norm(x, [x.size(-1)], w, b).relu()


@pytest.mark.parametrize("fn,shapes", [(_fn, [(4, 6, 8), (4, 6, 8)]), (_norm_relu, [(5, 16), (16,), (16,)])])
def test_cpu_launchers_call_the_packed_entry(fn, shapes):
    """CPU launchers (pointwise and reduction) pass one struct.pack of the arguments to the
    kernel's packed entry, not one ctypes conversion per argument; results match eager."""
    xs = [torch.randn(s) for s in shapes]
    sf = check(fn, *xs)
    runners = [r for r in sf._runners.values() if hasattr(r, "compiled")]
    assert runners
    for r in runners:
        assert "_fn(_pk(" in r.compiled.launcher_source or ")(_pk(*a))" in r.compiled.launcher_source
        assert r.namespace["_fn"].__name__.endswith("_packed")
    for _ in range(2):
        torch.testing.assert_close(sf(*xs), fn(*xs))


@pytest.mark.parametrize("cooperative", [False, True])
def test_shim_launch_hands_the_driver_every_argument(monkeypatch, cooperative):
    """The launch shim (a C function of one pointer, built with the system compiler) calls the
    driver function with the kernel, grid, block, shared memory, stream and argument array that
    one struct.pack_into wrote, and the argument slots follow its head; a refused launch raises
    LaunchError naming the kernel. A C callback stands in for cuLaunchKernel here."""
    import struct

    from graphfuser.runtime import cuda_driver
    from graphfuser.runtime.errors import LaunchError

    u, p = ctypes.c_uint, ctypes.c_void_p
    calls = []
    proto = ctypes.CFUNCTYPE(ctypes.c_int, p, u, u, u, u, u, u, u, p, p, *([] if cooperative else [p]))

    def fake(*args):
        calls.append(tuple(0 if a is None else a for a in args))
        return 0 if args[4] <= 1024 else 1

    cb = proto(fake)
    monkeypatch.setattr(cuda_driver, "driver_launchers", lambda: (cb, cb))
    monkeypatch.setattr(cuda_driver, "single_device", lambda: True)
    monkeypatch.setattr(cuda_driver, "error_string", lambda err: f"code {int(err)}")
    cuda_driver.shim_launchers.cache_clear()
    try:
        shim = cuda_driver.shim_launchers()
    finally:
        cuda_driver.shim_launchers.cache_clear()
    if shim is None:
        pytest.skip("no C compiler for the launch shim")
    kinds = ("ptr", "i32", "i64", "f32", "f64")
    k = object.__new__(cuda_driver.CudaKernel)
    k.name, k.cooperative, k.device_index, k.arg_kinds = "k_fake", cooperative, 0, kinds
    k.api, k.func, k._shim = "shim", 0xABC, shim
    codes = "".join(cuda_driver._STRUCT_CODES[x] for x in kinds)
    k._struct = struct.Struct(cuda_driver._HEAD_FIXED + cuda_driver._HEAD_CALL + codes)
    k.slots = ctypes.create_string_buffer(k._struct.size)
    k.params_address = 0x5000
    k._raise = cuda_driver.CudaKernel._raise.__get__(k)
    k._launch_elsewhere = None
    launch = k._build_launch()
    assert k.launch_api == "shim"
    launch((3, 2, 1), (128, 1, 1), 0x77, 0xDEAD0, -5, 1 << 40, 1.5, -2.25, shared_mem=64)
    (args,) = calls
    assert args[0] == 0xABC and args[1:7] == (3, 2, 1, 128, 1, 1) and args[7:10] == (64, 0x77, 0x5000)
    assert len(args) == (10 if cooperative else 11) and (cooperative or args[10] == 0)
    head = struct.calcsize(cuda_driver._HEAD_FIXED + cuda_driver._HEAD_CALL)
    assert struct.unpack_from("@" + codes, k.slots.raw, head) == (0xDEAD0, -5, 1 << 40, 1.5, -2.25)
    with pytest.raises(LaunchError, match="k_fake.*code 1"):
        launch((1, 1, 1), (4096, 1, 1), 0, 1, 2, 3, 4.0, 5.0)
