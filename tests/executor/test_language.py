"""The TorchScript language in host programs: every construct scripted models emit runs and
matches eager (values, mutation of lists and dicts, raised errors), and a construct the table
has no handler for runs through torch.jit.script with one warning."""
import enum
import warnings
from typing import Dict, List, Optional, Tuple, Union

import pytest
import torch

import graphfuser
from graphfuser.executor import handlers


def same(a, b) -> None:
    """Equal values of the same Python type, recursively; tensors through assert_close."""
    assert type(a) is type(b), (a, b)
    if isinstance(a, (list, tuple)):
        assert len(a) == len(b), (a, b)
        for x, y in zip(a, b):
            same(x, y)
    elif isinstance(a, dict):
        assert list(a) == list(b), (a, b)
        for k in a:
            same(a[k], b[k])
    elif isinstance(a, torch.Tensor):
        torch.testing.assert_close(a, b)
    elif isinstance(a, float) and a != a:
        assert b != b, (a, b)   # nan
    else:
        assert a == b, (a, b)


def run_both(fn, *args, calls: int = 3):
    """``fn`` scripted by graphfuser and called ``calls`` times; every result equals
    torch.jit.script's (which returns lists where eager returns torch.Size)."""
    sf = graphfuser.script(fn)
    ts = torch.jit.script(fn)
    for _ in range(calls):
        same(sf(*args), ts(*args))
    return sf


def scalars(a: int, b: int, f: float):
    return (a / b, a // b, a % b, -a // b, -a % b, f // 2.0, f % -2.0, a ** b, 2 ** -1, round(f), round(-f),
            int(f), float(a), bool(a), abs(-a), min(a, b), max([a, b, 3]), a & b, a | b, a ^ b)


@pytest.mark.parametrize("a,b,f", [(7, 2, 2.5), (-7, 3, -0.5), (6, 4, 3.5)])
def test_int_and_float_semantics_are_torchscripts(a, b, f):
    sf = graphfuser.script(scalars)
    for _ in range(3):
        assert sf(a, b, f) == torch.jit.script(scalars)(a, b, f)


def lists(x: torch.Tensor, xs: List[torch.Tensor]):
    out: List[int] = [3, 1, 2]
    alias = out
    alias.append(5)
    out.insert(0, 9)
    out[1] = 7
    last = out.pop()
    out.extend([4, 4])
    cp = out.copy()
    cp.reverse()
    srt = sorted(out)
    out.sort()
    total = 0
    for v in out[1:4]:
        total += v
    ys = []
    for t in xs:
        ys.append(t * 2.0)
    return x + len(ys), out, alias is out, last, cp, srt, total, 4 in out, out * 2, ys, out[-1]


def test_list_ops_mutate_and_alias_as_in_torchscript():
    x = torch.rand(3)
    run_both(lists, x, [torch.rand(2), torch.rand(3)])


def dicts(x: torch.Tensor):
    d: Dict[str, torch.Tensor] = {}
    d["a"] = x
    d["b"] = x * 2.0
    e = d.copy()
    e["c"] = x + 1.0
    ks = list(d.keys())
    vs = list(d.values())
    n = 0
    for k, v in e.items():
        n += len(k)
    popped = e.pop("a")
    has = "a" in e
    return d, ks, vs, n, popped, has, e.get("zz", x), e["b"]


def test_dict_ops_and_dict_output():
    run_both(dicts, torch.rand(4))


def strings(x: torch.Tensor, name: str, n: int):
    s = "{} has {} items".format(name, n) + "!" + str(n) + name[1:3] + name[-1]
    return x.sum() * len(s), s, s.startswith(name), "%d-%s" % (n, name)


def test_string_ops_and_formatting():
    run_both(strings, torch.rand(3), "layer", 12)


def metadata(x: torch.Tensor):
    return (x.size(), x.size(-1), x.dim(), x.numel(), x.dtype == torch.float32, x.device, x.device.type, x.is_nested,
            x.is_floating_point(), x.shape[0] * 2, torch.tensor(x.size(0)) + 1, float(x.sum()) > -1e9)


def test_tensor_metadata():
    run_both(metadata, torch.rand(3, 5))


def optional_union(x: torch.Tensor, y: Optional[torch.Tensor], z: Union[int, torch.Tensor, List[int]]):
    if y is not None:
        x = x + y
    if isinstance(z, torch.Tensor):
        return x * z
    if isinstance(z, int):
        return x * float(z)
    return x * float(len(z))


def test_optional_and_isinstance():
    sf = graphfuser.script(optional_union)
    x = torch.rand(4)
    for y, z in [(None, 3), (x, x), (None, [1, 2]), (x, -2)]:
        torch.testing.assert_close(sf(x, y, z), torch.jit.script(optional_union)(x, y, z))


def bare_isinstance(x: torch.Tensor, z: Union[List[torch.Tensor], torch.Tensor]):
    # timm's CoaT: ``if isinstance(x_feat, list)`` with the bare builtin, not List[...]
    if isinstance(z, list):
        return x * float(len(z))
    return x + z


def test_bare_builtin_isinstance():
    sf = graphfuser.script(bare_isinstance)
    assert sf._torchscript is None
    x = torch.rand(4)
    for z in [[x, x], x, [x]]:
        torch.testing.assert_close(sf(x, z), torch.jit.script(bare_isinstance)(x, z))


def raises(x: torch.Tensor, n: int):
    if n > 2:
        raise ValueError("n is too large: " + str(n))
    return x * n


def test_raise_matches_torchscript_type_and_message():
    sf = graphfuser.script(raises)
    ts = torch.jit.script(raises)
    x = torch.rand(3)
    for _ in range(3):
        torch.testing.assert_close(sf(x, 1), raises(x, 1))
    with pytest.raises(torch.jit.Error) as ts_err:
        ts(x, 5)
    with pytest.raises(torch.jit.Error, match=r"builtins.ValueError: n is too large: 5") as gf_err:
        sf(x, 5)
    assert str(ts_err.value).strip().splitlines()[-1] == str(gf_err.value).strip().splitlines()[-1]


def warns(x: torch.Tensor):
    if x.sum() > -1.0:
        torch._assert(x.dim() == 1, "needs 1-d")
        warnings.warn("x is positive")
    return x + 1.0


def test_warn_and_assert():
    sf = graphfuser.script(warns)
    x = torch.rand(3)
    for _ in range(3):
        with pytest.warns(UserWarning, match="x is positive"):
            torch.testing.assert_close(sf(x), x + 1.0)
    with pytest.raises(Exception, match="needs 1-d"):
        sf(torch.rand(2, 2))


class Child(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(4))

    def forward(self, x):
        return x * self.w


class Numbered(torch.nn.Module):
    """Children named "0", "1" (Sequential / ModuleList) are read with getattr."""

    def __init__(self):
        super().__init__()
        self.seq = torch.nn.Sequential(Child(), torch.nn.ReLU(), Child())
        self.blocks = torch.nn.ModuleList([Child() for _ in range(3)])
        self.table = torch.nn.ModuleDict({"a-b": Child()})

    def forward(self, x):
        x = self.seq(x)
        for b in self.blocks:
            x = b(x) + 1.0
        return self.table["a-b"](x)


def test_children_under_any_name():
    m = Numbered()
    sm = graphfuser.script(m)
    with torch.no_grad():
        for b in (2, 3, 5):
            x = torch.randn(b, 4)
            torch.testing.assert_close(sm(x), m(x))


def test_unhandled_construct_runs_through_torchscript_with_one_warning(monkeypatch):
    monkeypatch.delitem(handlers.HANDLERS, "prim::isinstance")
    with pytest.warns(UserWarning, match=r"prim::isinstance at .*test_language.py:\d+.*torch.jit.script, unfused") as w:
        sf = graphfuser.script(optional_union)
    assert len([r for r in w if "unfused" in str(r.message)]) == 1
    x = torch.rand(4)
    for y, z in [(None, 3), (x, x), (None, [1, 2])]:
        torch.testing.assert_close(sf(x, y, z), torch.jit.script(optional_union)(x, y, z))


def test_unhandled_construct_in_a_module_follows_train_and_eval(monkeypatch):
    monkeypatch.delitem(handlers.HANDLERS, "prim::is_nested")
    m = torch.nn.TransformerEncoderLayer(8, 2, 16, batch_first=True)
    with pytest.warns(UserWarning, match="prim::is_nested"):
        sm = graphfuser.script(m)
    x = torch.randn(2, 3, 8)
    m.eval()
    with torch.no_grad():
        torch.testing.assert_close(sm(x), m(x))
    m.train()
    torch.manual_seed(0)
    ref = m(x)
    torch.manual_seed(0)
    torch.testing.assert_close(sm(x), ref)


def zoo_constructs(x: torch.Tensor, names: List[str], n: int):
    """Constructs torchvision / timm graphs carry: dict(), update, items, any/all/sum of lists,
    list * int, torch.tensor of scalars and lists, slices of lists, enumerate, string keys."""
    feats: Dict[str, torch.Tensor] = {}
    for i, name in enumerate(names):
        feats[name] = x * float(i)
    more: Dict[str, torch.Tensor] = {}
    more["extra"] = x
    feats.update(more)
    pairs = list(feats.items())
    sizes = [n] * 3
    flags = [s > 1 for s in sizes]
    t = torch.tensor(n) + torch.tensor([1.0, 2.0]) + torch.as_tensor(sizes[:2], dtype=torch.float32)
    out = torch.zeros_like(x)
    for k, v in pairs:
        if k in names[1:]:
            out = out + v
    return (out, t, any(flags), all(flags), sum(sizes), sizes[-2:], len(pairs),
            divmod_like(n, 3), n / 4, -n // 4, -n % 4, 2 ** n, float(n) ** 0.5)


def divmod_like(a: int, b: int) -> Tuple[int, int]:
    return a // b, a % b


def test_zoo_constructs():
    for n in (1, 5, -3):
        run_both(zoo_constructs, torch.rand(2, 3), ["a", "b", "c"], n, calls=2)


@torch.jit.interface
class Scaler(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pass


class Double(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2.0


class WithInterface(torch.nn.Module):
    """An interface-typed submodule: its call stays prim::CallMethod (not inlined)."""

    impl: Scaler

    def __init__(self):
        super().__init__()
        self.impl = Double()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.impl.forward(x + 1.0).relu()


def test_call_method_into_an_interface_submodule():
    m = WithInterface()
    sm = graphfuser.script(m)
    assert "prim::CallMethod" in str(sm.graph)
    for b in (2, 3, 4):
        x = torch.randn(b, 4)
        torch.testing.assert_close(sm(x), m(x))


def test_a_handler_that_fails_at_run_time_falls_back_to_torchscript(monkeypatch):
    """A host program that raises where torch.jit.script does not: the call is answered by
    TorchScript, one warning names the error, and later calls run through TorchScript."""
    _failing_handler_recovers(monkeypatch, "host program raised AttributeError.*no_such_attribute.*unfused")


def _failing_handler_recovers(monkeypatch, warning: str) -> None:
    monkeypatch.setitem(handlers.HANDLERS, "prim::is_nested", handlers._template("{0}.no_such_attribute"))
    m = torch.nn.TransformerEncoderLayer(8, 2, 16, batch_first=True).eval()
    sm = graphfuser.script(m)
    x = torch.randn(2, 3, 8)
    with torch.no_grad():
        with pytest.warns(UserWarning, match=warning):
            torch.testing.assert_close(sm(x), m(x))
        with warnings.catch_warnings():
            warnings.simplefilter("error", UserWarning)
            for b in (3, 4):
                x = torch.randn(b, 3, 8)
                torch.testing.assert_close(sm(x), m(x))


def test_errors_torchscript_raises_too_are_not_swallowed():
    sf = graphfuser.script(raises)
    with pytest.raises(torch.jit.Error, match="too large"):
        sf(torch.rand(3), 7)
    with pytest.raises(RuntimeError, match="size of tensor"):
        graphfuser.script(lambda_add)(torch.rand(3), torch.rand(4))


def lambda_add(x: torch.Tensor, y: torch.Tensor):
    return x + y


def indexing(x: torch.Tensor, idx: torch.Tensor, mask: torch.Tensor):
    """Schemas out of the ordinary: Tensor?[] indices with None, in-place index_put_, kwarg-only
    arguments (alpha, dtype), list-returning ops."""
    y = x.clone()
    y[mask] = 0.0
    y[:, idx] += 1.0
    a = torch.add(y, x, alpha=2.0)
    parts = torch.chunk(a, 2, dim=1)
    s = a.sum(dim=1, dtype=torch.float64)
    return x[:, idx], a[..., 0], parts[0] * float(len(parts)), s, torch.where(mask)[0]


def test_indexing_and_unusual_schemas():
    x = torch.randn(4, 6)
    run_both(indexing, x, torch.tensor([0, 2, 5]), x > 0.5)


class _Fmt(str, enum.Enum):
    NCHW = "NCHW"
    NHWC = "NHWC"


class _EnumConst(torch.nn.Module):
    """timm's patch embedding keeps ``Format(str, Enum)`` members as constants: their repr is not
    Python source, so the host program binds them instead of printing them."""

    fmt: _Fmt

    def __init__(self):
        super().__init__()
        self.fmt = _Fmt.NHWC

    def forward(self, x):
        if self.fmt != _Fmt.NCHW:
            x = x.permute(0, 2, 3, 1)
        return torch.relu(x * 2.0) + 1.0


def test_enum_constants_run_in_the_host_program():
    m = _EnumConst()
    x = torch.randn(2, 3, 4, 5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")      # no fallback to torch.jit.script
        sf = graphfuser.script(m)
        for _ in range(3):
            same(sf(x), m(x))
    assert sf.graph is not None


def slice_assign_numbers(x: torch.Tensor, k: int, f: float):
    m = x.new_zeros((6, 5))
    m[0:2, 1:3] = k
    m[2:, :] = f
    m[5, 4] = True
    n = torch.zeros(3, dtype=torch.int64, device=x.device)
    n[1:] = f                       # float into int64: truncated as torch.tensor(f, dtype=int64)
    return m, n, torch.tensor(k, device=x.device), torch.tensor(f, device=x.device), \
        torch.tensor(True, device=x.device), torch.tensor(f, dtype=torch.float16, device=x.device)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])
def test_tensor_of_a_number(device):
    """``aten::tensor`` of a number (what TorchScript makes of ``t[...] = 3``) has torch.tensor's
    dtype and device; on CUDA it is filled on the device, never copied from the host (a pageable
    copy waits for the stream)."""
    x = torch.rand(2, device=device)
    run_both(slice_assign_numbers, x, 3, -2.75)
    if device == "cuda":
        from torch.profiler import ProfilerActivity, profile

        sf = graphfuser.script(slice_assign_numbers)
        for _ in range(3):
            sf(x, 3, -2.75)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as p:
            sf(x, 3, -2.75)
            torch.cuda.synchronize()
        assert not [e.name for e in p.events() if "HtoD" in e.name]


def hot_ops(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, m: torch.Tensor):
    c = torch.nn.functional.conv2d(x, w, b, 1, 1)
    c2 = torch.nn.functional.conv2d(x, w, None, 1, "same")
    p = torch.nn.functional.max_pool2d(c, 2, 2, 0, 1, False)
    f = p.flatten(1)
    l = torch.nn.functional.linear(f, m, None)
    g = torch.nn.functional.gelu(l, approximate="tanh")
    n = torch.nn.functional.layer_norm(g, [g.size(-1)], None, None, 1e-5)
    v = c.view(c.size(0), -1).unsqueeze(1).transpose(1, 2).permute(0, 2, 1).reshape(c.size(0), -1)
    mm = torch.mm(n, n.t())
    a = torch.addmm(mm, n, n.t(), beta=0.5, alpha=2.0)
    bb = torch.bmm(c.flatten(2), c.flatten(2).transpose(1, 2))
    ba = torch.baddbmm(bb, bb, bb, beta=0.25)
    s = torch.add(a, mm, alpha=2) - torch.sub(mm, a, alpha=0.5) * a / (mm.abs() + 1.0)
    return torch.cat([v, v], 1), torch.roll(c2, [1, -2], [2, 3]), c.select(1, 2), a, ba, torch.matmul(g, m), s


def test_hot_ops_through_python_bindings():
    """The ops the host program calls through torch's Python bindings (cheaper than the
    OpOverload) return what TorchScript returns."""
    from graphfuser.ops.aten import _BINDINGS, python_binding

    args = (torch.randn(2, 3, 8, 8), torch.randn(4, 3, 3, 3), torch.randn(4), torch.randn(64, 64))
    run_both(hot_ops, *args)
    sf = graphfuser.script(hot_ops)
    sf(*args)
    bound = {id(v) for v in sf._profiling.fn.__globals__.values()}
    for name, overload in [("conv2d", ""), ("conv2d", "padding"), ("linear", ""), ("view", ""), ("unsqueeze", ""),
                           ("gelu", ""), ("roll", ""), ("addmm", ""), ("baddbmm", ""), ("select", "int"),
                           ("add", "Tensor"), ("sub", "Tensor"), ("mul", "Tensor"), ("div", "Tensor")]:
        assert (name, overload) in _BINDINGS
        assert id(python_binding(name, overload)) in bound, name


def test_a_failing_host_program_under_cuda_autocast_runs_the_module_eagerly(monkeypatch):
    """Under CUDA autocast TorchScript's executor crashed the process on nn.MultiheadAttention
    models: a module whose host program raises there runs its own forward instead."""
    from graphfuser.executor import recovery

    monkeypatch.setattr(recovery, "_torchscript_unsafe", lambda: True)
    _failing_handler_recovers(monkeypatch, "host program raised AttributeError.*runs eagerly, unfused")
