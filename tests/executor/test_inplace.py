"""In-place ops: on intermediates they become functional and fuse; graph inputs are never fused."""
import torch

import graphfuser
from helpers import fusion_groups


def h(x, y):
    a = x * 2.0
    a.add_(y)
    a.relu_()
    y.mul_(3.0)
    return a + y


def test_inplace_on_intermediates_fuses_and_inputs_are_mutated_like_eager():
    sf = graphfuser.script(h)
    for _ in range(4):
        x, y = torch.randn(4, 8), torch.randn(4, 8)
        x2, y2 = x.clone(), y.clone()
        torch.testing.assert_close(sf(x, y), h(x2, y2))
        torch.testing.assert_close(y, y2)     # the input was written exactly as eager writes it
        torch.testing.assert_close(x, x2)
    g = graphfuser.last_executed_optimized_graph()
    group = fusion_groups(g)[0]
    kinds = [n.kind for n in group.subgraph.nodes() if n.kind != "prim::Constant"]
    assert kinds == ["aten::mul", "aten::add", "aten::relu"]
    # the write to the input %y stays outside every group, after the group that reads %y
    text = str(g).split("with ")[0]
    assert "aten::mul_(%y" in text
    assert text.index("prim::CpuFusionGroup_0") < text.index("aten::mul_(%y")
    for grp in fusion_groups(g):
        assert not any(n.kind.endswith("_") for n in grp.subgraph.nodes())


def test_input_written_then_read():
    def k(x):
        x.add_(1.0)
        return x * 2.0 + x.sin()

    sf = graphfuser.script(k)
    for _ in range(4):
        x = torch.randn(4, 8)
        x2 = x.clone()
        torch.testing.assert_close(sf(x), k(x2))
        torch.testing.assert_close(x, x2)


def test_inplace_on_a_view_of_an_intermediate():
    def k(x):
        a = x * 2.0
        a[0].zero_()
        a[:, 1].add_(5.0)
        return a.relu()

    sf = graphfuser.script(k)
    for _ in range(4):
        x = torch.randn(4, 8)
        torch.testing.assert_close(sf(x), k(x))


def test_inplace_returned_alias():
    def k(x, c: bool):
        a = x * 2.0
        a.add_(1.0)
        if c:
            y = a
        else:
            y = x
        return y.relu()

    sf = graphfuser.script(k)
    x = torch.randn(4, 8)
    for i in range(5):
        torch.testing.assert_close(sf(x, i % 2 == 0), k(x, i % 2 == 0))
