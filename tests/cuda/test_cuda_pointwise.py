"""Fused pointwise kernels on the GPU against eager: layouts, dtypes, streams, graphs, devices."""
import pytest
import torch

import graphfuser
from graphfuser.executor import compiled

pytestmark = pytest.mark.cuda

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64]


def _run(fn, *args, n=4):
    sf = graphfuser.script(fn)
    for _ in range(n):
        out = sf(*args)
    g = str(graphfuser.last_executed_optimized_graph())
    assert "CudaFusionGroup" in g, g
    return out


def _tol(dtype):
    return {"rtol": 2e-2, "atol": 2e-2} if dtype in (torch.float16, torch.bfloat16) else {}


def chain(x, y):
    return torch.sigmoid(x * y + 2.0) * torch.tanh(x - y) + torch.nn.functional.gelu(x, approximate="tanh")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", ["dense", "transposed", "sliced", "expanded", "broadcast", "channels_last", "ragged"])
def test_chain_layouts(dtype, layout):
    d = "cuda"
    if layout == "dense":
        x, y = torch.randn(64, 1024, device=d, dtype=dtype), torch.randn(64, 1024, device=d, dtype=dtype)
    elif layout == "transposed":
        x, y = torch.randn(1024, 64, device=d, dtype=dtype).t(), torch.randn(64, 1024, device=d, dtype=dtype)
    elif layout == "sliced":
        x, y = torch.randn(64, 2048, device=d, dtype=dtype)[:, ::2], torch.randn(64, 1024, device=d, dtype=dtype)
    elif layout == "expanded":
        x, y = torch.randn(1, 1024, device=d, dtype=dtype).expand(64, 1024), torch.randn(64, 1024, device=d, dtype=dtype)
    elif layout == "broadcast":
        x, y = torch.randn(8, 1, 256, device=d, dtype=dtype), torch.randn(8, 6, 256, device=d, dtype=dtype)
    elif layout == "channels_last":
        x = torch.randn(4, 16, 9, 9, device=d, dtype=dtype).to(memory_format=torch.channels_last)
        y = torch.randn(16, 1, 1, device=d, dtype=dtype)
    else:
        x, y = torch.randn(37, 101, device=d, dtype=dtype), torch.randn(101, device=d, dtype=dtype)
    out = _run(chain, x, y)
    ref = chain(x, y)
    torch.testing.assert_close(out, ref, **_tol(dtype))
    if layout == "channels_last":
        assert out.stride() == ref.stride()


def ints(a, b):
    return ((a * 3 + b) & 7) - (a > b).to(torch.int32)


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_integer(dtype):
    a = torch.randint(-100, 100, (1000, 33), device="cuda", dtype=dtype)
    b = torch.randint(-100, 100, (1000, 33), device="cuda", dtype=dtype)
    torch.testing.assert_close(_run(ints, a, b), ints(a, b))


def bools(a, b):
    return torch.logical_and(a > 0, b) | torch.isnan(a)


def test_bool():
    a = torch.randn(4096, device="cuda")
    a[::7] = float("nan")
    b = torch.rand(4096, device="cuda") > 0.5
    torch.testing.assert_close(_run(bools, a, b), bools(a, b))


def relu_add(x):
    return (x + 1.0).relu()


def test_new_batch_size_reuses_kernel():
    sf = graphfuser.script(relu_add)
    for n in (1024, 1024, 1024, 4096, 4096, 4096, 513):
        x = torch.randn(n, 128, device="cuda")
        torch.testing.assert_close(sf(x), relu_add(x))


def test_streams_and_graphs():
    sf = graphfuser.script(relu_add)
    x = torch.randn(1 << 20, device="cuda")
    for _ in range(4):
        sf(x)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        y = sf(x)
    torch.cuda.current_stream().wait_stream(s)
    torch.testing.assert_close(y, relu_add(x))
    static_x = torch.randn(1 << 20, device="cuda")
    g = torch.cuda.CUDAGraph()
    with torch.cuda.stream(s):
        sf(static_x)
        with torch.cuda.graph(g, stream=s):
            static_y = sf(static_x)
    static_x.copy_(torch.randn(1 << 20, device="cuda"))
    g.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(static_y, relu_add(static_x))


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_second_device():
    x = torch.randn(1000, 100, device="cuda:1")
    torch.testing.assert_close(_run(chain, x, x), chain(x, x))


def test_huge_index_and_unaligned():
    x = torch.randn(1 + (1 << 20), device="cuda")[1:]
    torch.testing.assert_close(_run(relu_add, x), relu_add(x))


def test_scalar_args_and_int_scalar():
    def f(x, k: int, s: float):
        return (x * s + k).relu() + x.size(0)
    x = torch.randn(300, 7, device="cuda")
    sf = graphfuser.script(f)
    for k in range(4):
        torch.testing.assert_close(sf(x, k, 0.5 * k), f(x, k, 0.5 * k))


def small_output_next_to_a_big_one(x0, x1):
    v0 = x1 * x0.size(-1)
    v1 = torch.where(x0 > 0, v0, 2.0)
    return torch.where(v0 > 0, v1, 2), v0


@pytest.mark.parametrize("dtype", [torch.int8, torch.float32, torch.float16])
def test_output_broadcast_along_the_vectorized_dim(dtype):
    """An output smaller than the loop domain ([B, 1, 1] next to [B, 33, 16]) is stored as one
    element per row in the vectorized kernel: a vector store there wrote past the row and faulted
    with a misaligned address."""
    x0 = (torch.arange(16 * 33 * 16, device="cuda") % 5 - 2).to(dtype).view(16, 33, 16)
    x1 = (torch.arange(16, device="cuda") % 3).to(dtype).view(16, 1, 1)
    out = _run(small_output_next_to_a_big_one, x0, x1)
    torch.cuda.synchronize()
    for got, want in zip(out, small_output_next_to_a_big_one(x0, x1)):
        assert got.shape == want.shape and got.dtype == want.dtype
        torch.testing.assert_close(got, want)


def test_variants_compile_on_first_use():
    """Only the 32-bit vectorized variant is built with the group; an unaligned call then loads
    the scalar one, which is launched directly from then on."""
    def f(x):
        return (x * 2.0).relu() + 1.0

    x = torch.randn(4096, device="cuda")
    sf = graphfuser.script(f)
    for _ in range(4):
        sf(x)
    runners = [r for r in sf._runners.values() if hasattr(r, "namespace") and "_fns" in r.namespace]
    assert runners
    ns = runners[0].namespace
    assert ns["_fns"][1] is not None and ns["_fns"][0] is None and ns["_fns"][3] is None
    u = torch.randn(4097, device="cuda")[1:]            # misaligned by one element: scalar variant
    for _ in range(2):
        torch.testing.assert_close(sf(u), f(u))
    assert ns["_fns"][0] is not None and ns["_l0"] == ns["_fns"][0].launch


def _int_casts(x):
    y = x * 1.0
    return y.to(torch.uint8), y.to(torch.int8), y.to(torch.int16), y.to(torch.int32), y.to(torch.int64), y.to(torch.bool)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.float16])
def test_out_of_range_float_to_int_casts_match_eager(dtype):
    """Out-of-range float -> integer conversions are undefined in C++; torch's kernels convert to
    uint8 through int64 (so +inf gives 255 on the GPU), the rest directly: fused kernels do the same
    (fuzz graph 637 of seed 9393: +inf -> uint8 gave 0)."""
    vals = [300.7, -1.5, -300.2, 1e10, -1e10, 255.9, 256.0, 65504.0, -65504.0, 4e9, -4e9,
            float("inf"), float("-inf"), float("nan"), 0.5, -0.5]
    x = torch.tensor(vals * 8, dtype=torch.float64).to(dtype).cuda()
    got, want = _run(_int_casts, x), _int_casts(x)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and torch.equal(g, w), (g.dtype, g[:len(vals)].tolist(), w[:len(vals)].tolist())
