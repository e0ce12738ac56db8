"""``emulate_precision_casts``: fp16/bf16 intermediates rounded as eager rounds them (issue 10,
class 12). With the knob on, pointwise chains match eager bit for bit; off (the default), the
fp32 intermediates are a named deliberate deviation (``config.DEVIATIONS``)."""
from __future__ import annotations

import pytest
import torch

import graphfuser
from graphfuser.config import DEVIATIONS, Config, config
from helpers import DEVICES, fallback_counter, fusion_groups

HALF = [torch.float16, torch.bfloat16]


def mul_float(a, b):
    return (a * b).float()


def chain(a, b):
    c = a * b + a
    d = (c - b * 0.1) / (b.abs() + 1.0)
    return torch.where(d > 0, d * d, -d) * 3.0 + torch.maximum(a, d), torch.clamp(c * a, -2.0, 2.0).double()


def scalars(a, b, s: float):
    return (a * s - b) * (b + s)


def alpha(a, b):
    return torch.add(a, b, alpha=3) * b - torch.sub(a * a, b, alpha=0.5)


def _run(fn, *args):
    sf = graphfuser.script(fn)
    counts = None
    with config.override(disable=["fallback"]):
        for _ in range(4):
            out = sf(*args)
            if counts is None and sf._optimized is not None:
                counts = fallback_counter(sf)
    assert fusion_groups(sf._optimized) and counts["fallback"] == 0, str(sf._optimized)
    return out


def _inputs(device, dtype, n=4099):
    g = torch.Generator().manual_seed(0)
    a = (torch.randn(n, generator=g) * 3).to(dtype).to(device)
    b = (torch.randn(n, generator=g) * 3).to(dtype).to(device)
    return a, b


def _exact(out, ref):
    outs = out if isinstance(out, tuple) else (out,)
    refs = ref if isinstance(ref, tuple) else (ref,)
    for o, r in zip(outs, refs):
        assert o.dtype == r.dtype
        torch.testing.assert_close(o, r, rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("fn", [mul_float, chain, alpha])
def test_bit_exact_with_the_knob(device, dtype, fn):
    # add(alpha=) / sub(alpha=) compute a + alpha * b inside one op: eager's CPU vector body uses
    # an fma there and its scalar tail (the last n % 32 elements) does not, for bf16 even rounding
    # alpha * b first, so only the vector body has one answer to match: n a multiple of 32 and
    # fma off for the kernel (across ops the rounding already keeps the compiler from contracting).
    a, b = _inputs(device, dtype, n=4096 if fn is alpha else 4099)
    disable = ["fma"] if fn is alpha else []
    with config.override(emulate_precision_casts=True, disable=disable):
        out = _run(fn, a, b)
    _exact(out, fn(a, b))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", HALF)
def test_runtime_scalar_chain_bit_exact(device, dtype):
    a, b = _inputs(device, dtype)
    with config.override(emulate_precision_casts=True):
        out = _run(scalars, a, b, 0.37)
    _exact(out, scalars(a, b, 0.37))


@pytest.mark.parametrize("dtype", HALF)
def test_default_keeps_fp32_intermediates(dtype):
    """The deviation is real (so the exact test above can fail): without the knob, (a * b).float()
    differs from eager in many elements."""
    a, b = _inputs("cpu", dtype)
    out = _run(mul_float, a, b)
    ref = mul_float(a, b)
    assert (out != ref).sum() > 100
    torch.testing.assert_close(out, ref, rtol=1e-2, atol=1e-2)


def test_knob_spellings_and_cache_key():
    assert Config(env={}).emulate_precision_casts is False
    on = Config(env={"PYTORCH_NVFUSER_ENABLE": "emulate_precision_casts"})
    assert on.emulate_precision_casts is True
    assert "emulate_precision_casts" in on.codegen_key()
    assert "emulate_precision_casts" not in Config(env={}).codegen_key()
    assert DEVIATIONS["reduced_precision_intermediates"]["knob"] == "emulate_precision_casts"


def test_knob_rounds_in_the_kernel_ir():
    from graphfuser.codegen.lower import lower_group
    from graphfuser.ir import parse_graph

    g = parse_graph(
        "graph(%a : Half(8, strides=[1], requires_grad=0, device=cpu), %b : Half(8, strides=[1], requires_grad=0, device=cpu)):\n"
        "  %c : Half(8, strides=[1], requires_grad=0, device=cpu) = aten::mul(%a, %b)\n"
        "  %d : Half(8, strides=[1], requires_grad=0, device=cpu) = aten::mul(%c, %a)\n"
        "  return (%d)\n")
    with config.override(emulate_precision_casts=True):
        k, _ = lower_group(g)
    assert any(getattr(e, "op", None) == "round_half" for e in k.exprs())
    k, _ = lower_group(g)
    assert not any(getattr(e, "op", None) == "round_half" for e in k.exprs())
