"""The correctness matrix: scripted == eager across layouts, dtypes and devices, with fusion.

One ``check(fn, *inputs)`` (tests/helpers.py) per case; the same matrix runs per device, so
the compiled CUDA backend is held to what the CPU backend is held to.
"""
import os

import pytest
import torch

from helpers import DEVICES, check

FLOATS = [torch.float32, torch.float16, torch.bfloat16, torch.float64]
INTS = [torch.int32, torch.int64]
DTYPES = FLOATS + INTS + [torch.bool]


def make(*shape, dtype, device, seed=[0]):
    seed[0] += 1
    gen = torch.Generator().manual_seed(seed[0])
    if dtype.is_floating_point:
        t = torch.randn(shape, generator=gen, dtype=torch.float64)
    elif dtype == torch.bool:
        t = torch.randint(0, 2, shape, generator=gen)
    else:
        t = torch.randint(-20, 20, shape, generator=gen)
    return t.to(dtype=dtype, device=device)


# Each layout builds (x, y), two operands of broadcast-compatible shapes.
LAYOUTS = {
    "dense": lambda m: (m(4, 6, 8), m(4, 6, 8)),
    "transposed": lambda m: (m(8, 4).t(), m(8, 4).t()),
    "permuted": lambda m: (m(8, 6, 4).permute(2, 1, 0), m(4, 6, 8)),
    "sliced": lambda m: (m(4, 6, 16)[:, :, ::2], m(4, 12, 8)[:, 3:9]),
    "expanded": lambda m: (m(4, 1, 8).expand(4, 6, 8), m(4, 6, 8)),
    "broadcast": lambda m: (m(4, 1, 8), m(4, 6, 8)),
    "broadcast_rank": lambda m: (m(8), m(4, 6, 8)),
    "channels_last": lambda m: (m(2, 3, 4, 5).to(memory_format=torch.channels_last),
                                m(2, 3, 4, 5).to(memory_format=torch.channels_last)),
    "mixed_memory_format": lambda m: (m(2, 3, 4, 5).to(memory_format=torch.channels_last), m(2, 3, 4, 5)),
    "zero_dim": lambda m: (m(4, 6, 8), m()),
}


def float_chain(x, y):
    a = (x + y) * 0.5
    b = a.sigmoid() - x.tanh()
    return torch.where(x > 0, b, a * 2.0).relu()   # a condition on an input: no rounding-dependent branch


def float_math(x, y):
    return torch.nn.functional.gelu(x * y, approximate="tanh") + torch.exp(-x.abs()) * 0.25


def int_chain(x, y):
    a = (x + y) * 3
    return torch.maximum(a - y, x) + (a > 0).to(a.dtype)


def bool_chain(x, y):
    return (x & y) | (~x ^ y)


def fn_for(dtype):
    if dtype.is_floating_point:
        return float_chain
    return bool_chain if dtype == torch.bool else int_chain


def matrix_cases() -> list:
    """(layout, dtype) pairs. Every compiled kernel costs a compiler run (~0.4 s on the CPU), so
    by default: every layout in float32, and every other dtype on a rotating third of the
    layouts (each layout still meets several dtypes). GRAPHFUSER_FULL_MATRIX=1 runs the product."""
    names = list(LAYOUTS)
    if os.environ.get("GRAPHFUSER_FULL_MATRIX") == "1":
        return [(layout, dtype) for dtype in DTYPES for layout in names]
    cases = [(layout, torch.float32) for layout in names]
    others = [d for d in DTYPES if d != torch.float32]
    for k, dtype in enumerate(others):
        cases += [(names[(k + j * len(others)) % len(names)], dtype) for j in range(3)] + [("dense", dtype)]
    return list(dict.fromkeys(cases))


def _id(case) -> str:
    return f"{case[0]}-{str(case[1]).replace('torch.', '')}"


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("layout, dtype", matrix_cases(), ids=[_id(c) for c in matrix_cases()])
def test_matrix(layout, dtype, device):
    x, y = LAYOUTS[layout](lambda *s: make(*s, dtype=dtype, device=device))
    check(fn_for(dtype), x, y)


TRANSCENDENTAL_CASES = [("dense", torch.float16), ("sliced", torch.bfloat16), ("broadcast", torch.float64),
                        ("permuted", torch.float32)]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("layout, dtype", TRANSCENDENTAL_CASES, ids=[_id(c) for c in TRANSCENDENTAL_CASES])
def test_transcendentals(layout, dtype, device):
    x, y = LAYOUTS[layout](lambda *s: make(*s, dtype=dtype, device=device))
    check(float_math, x, y)


@pytest.mark.parametrize("device", DEVICES)
def test_type_promotion(device):
    def promote(x, y, i):
        return (x * y + i).relu() * 1.5

    m = lambda *s, dtype: make(*s, dtype=dtype, device=device)  # noqa: E731
    check(promote, m(4, 8, dtype=torch.float16), m(4, 8, dtype=torch.float32), m(4, 8, dtype=torch.int64))
    check(promote, m(4, 8, dtype=torch.bfloat16), m(8, dtype=torch.bfloat16), m(4, 1, dtype=torch.int32))
    check(promote, m(4, 8, dtype=torch.int32), m(4, 8, dtype=torch.int64), m(4, 8, dtype=torch.bool))


@pytest.mark.parametrize("device", DEVICES)
def test_scalar_arguments(device):
    def scaled(x, s: float, k: int):
        return (x * s + k).tanh() - s

    x = make(4, 8, dtype=torch.float32, device=device)
    sf = check(scaled, x, 0.5, 3)
    for s, k in [(2.0, -1), (-0.25, 7)]:
        torch.testing.assert_close(sf(x, s, k), scaled(x, s, k))


@pytest.mark.parametrize("device", DEVICES)
def test_multiple_outputs_and_intermediates(device):
    def outs(x, y):
        a = x * y
        b = a + 1.0
        return a, b.relu(), b.sigmoid()

    x, y = make(4, 6, 8, dtype=torch.float32, device=device), make(4, 1, 8, dtype=torch.float32, device=device)
    check(outs, x, y)


@pytest.mark.parametrize("device", DEVICES)
def test_new_sizes_reuse_the_specialization(device):
    def chain(x, y):
        return (x - y).abs() * 0.5 + y

    sf = check(chain, make(4, 6, 8, dtype=torch.float32, device=device),
               make(4, 1, 8, dtype=torch.float32, device=device))
    for shape in [(2, 5, 3), (16, 2, 33), (5, 7, 9)]:
        x = make(*shape, dtype=torch.float32, device=device)
        y = make(shape[0], 1, shape[2], dtype=torch.float32, device=device)
        torch.testing.assert_close(sf(x, y), chain(x, y))


@pytest.mark.parametrize("device", DEVICES)
def test_empty_and_single_element(device):
    def chain(x):
        return (x * 2.0).relu() + 1.0

    sf = check(chain, make(4, 8, dtype=torch.float32, device=device))
    for shape in [(0, 8), (1, 1), (4, 0)]:
        x = make(*shape, dtype=torch.float32, device=device)
        torch.testing.assert_close(sf(x), chain(x))


@pytest.mark.parametrize("device", DEVICES)
def test_special_values(device):
    def chain(x):
        return torch.where(x != x, torch.zeros_like(x), x.clamp(-1.0, 1.0)) + x.sign()

    x = torch.tensor([[float("nan"), float("inf"), -float("inf"), 0.0], [-0.0, 1e-30, -5.0, 3.0]], device=device)
    check(chain, x, fused=None)
