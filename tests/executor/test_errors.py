"""Bad input: clear errors, never a wrong answer."""
import pytest
import torch

import graphfuser
from helpers import fallback_counter, fusion_groups


def f(x, y):
    return (x + y).relu() * 2.0


def optimized(fn, *inputs):
    sf = graphfuser.script(fn)
    for _ in range(3):
        sf(*inputs)
    return sf


def uses_import(x):
    import os  # noqa: F401  (TorchScript cannot compile an import)
    return x


def uses_with_no_grad(x):
    with torch.no_grad():
        y = x * 2.0
    return y


def uses_percent_format(x, n: int):
    s = "%d items" % n
    return x * len(s)


def test_uncompilable_python_raises_unsupported_error_naming_it():
    with pytest.raises(graphfuser.UnsupportedError, match=r"could not script uses_import.*import"):
        graphfuser.script(uses_import)


def test_with_no_grad_runs_in_the_host_program():
    sf = graphfuser.script(uses_with_no_grad)
    x = torch.rand(3, 4, requires_grad=True)
    for _ in range(3):
        out = sf(x)
        torch.testing.assert_close(out, uses_with_no_grad(x))
        assert not out.requires_grad and torch.is_grad_enabled()


def test_percent_format_runs_in_the_host_program():
    sf = graphfuser.script(uses_percent_format)
    x = torch.rand(3, 4)
    for n in (1, 12, 3):
        torch.testing.assert_close(sf(x, n), uses_percent_format(x, n))


def test_not_a_function():
    with pytest.raises(TypeError, match="expects a function or nn.Module"):
        graphfuser.script(42)


@pytest.mark.parametrize("stage", ["profiling", "optimized"])
def test_wrong_number_of_arguments(stage):
    x, y = torch.rand(4, 8), torch.rand(4, 8)
    sf = optimized(f, x, y) if stage == "optimized" else graphfuser.script(f)
    with pytest.raises(TypeError, match=r"f\(\) takes 2 argument\(s\) \(x, y\) but 3 were given"):
        sf(x, y, y)
    with pytest.raises(TypeError, match=r"f\(\) missing required argument 'y'"):
        sf(x)
    with pytest.raises(TypeError, match=r"unexpected keyword argument\(s\) z"):
        sf(x, y=y, z=y)
    torch.testing.assert_close(sf(x, y=y), f(x, y))


@pytest.mark.parametrize("stage", ["profiling", "optimized", "disabled"])
@pytest.mark.parametrize("bad", [3, None, [1.0, 2.0], "s", 2.5])
def test_non_tensor_for_a_tensor_argument(stage, bad):
    x, y = torch.rand(4, 8), torch.rand(4, 8)
    if stage == "disabled":
        graphfuser.set_enabled(False)
    sf = optimized(f, x, y) if stage == "optimized" else graphfuser.script(f)
    with pytest.raises(TypeError, match=rf"f\(\): argument 'y' must be a Tensor, got {type(bad).__name__}"):
        sf(x, bad)
    with pytest.raises(TypeError, match=r"argument 'x' must be a Tensor"):
        sf(bad, y)


def test_optional_tensor_argument_accepts_none():
    from typing import Optional

    def g(x, bias: Optional[torch.Tensor] = None):
        y = x * 2.0
        if bias is not None:
            y = y + bias
        return y.relu()

    sf = graphfuser.script(g)
    x, b = torch.randn(4, 8), torch.randn(8)
    for _ in range(3):
        torch.testing.assert_close(sf(x), g(x))
        torch.testing.assert_close(sf(x, b), g(x, b))
        torch.testing.assert_close(sf(x, None), g(x, None))


@pytest.mark.parametrize("stage", ["profiling", "optimized"])
def test_mixed_devices_raise_like_eager(stage):
    x, y = torch.rand(4, 8), torch.rand(4, 8)
    sf = optimized(f, x, y) if stage == "optimized" else graphfuser.script(f)
    m = torch.rand(4, 8, device="meta")
    with pytest.raises(RuntimeError) as eager:
        f(x, m)
    with pytest.raises(RuntimeError) as ours:
        sf(x, m)
    assert str(ours.value) == str(eager.value)
    torch.testing.assert_close(sf(x, y), f(x, y))        # still fine afterwards


def test_other_device_after_optimization_runs_the_fallback():
    x, y = torch.rand(4, 8), torch.rand(4, 8)
    sf = optimized(f, x, y)
    counts = fallback_counter(sf)
    m = torch.rand(4, 8, device="meta")
    out = sf(m, m)
    assert out.device.type == "meta" and out.shape == (4, 8) and out.dtype == torch.float32
    assert counts["fallback"] == 1


def test_profiled_on_a_device_without_backend_is_not_fused():
    m = torch.rand(4, 8, device="meta")
    sf = graphfuser.script(f)
    for _ in range(3):
        out = sf(m, m)
    assert out.device.type == "meta"
    assert not fusion_groups(sf._optimized)


def test_errors_raised_by_the_function_propagate():
    def g(x):
        if x.dim() != 2:
            raise ValueError("need a matrix")
        return x.relu() + 1.0

    sf = graphfuser.script(g)
    for _ in range(3):
        sf(torch.rand(2, 2))
    with pytest.raises(Exception, match="need a matrix"):
        sf(torch.rand(2))
    torch.testing.assert_close(sf(torch.rand(3, 3).neg()), torch.ones(3, 3))
