"""If / Loop stay blocks; their bodies fuse; results match eager whatever path runs."""
import torch

import graphfuser
from helpers import assert_in_order, fallback_counter, fusion_groups


def loop_and_branch(x, n: int):
    for _ in range(n):
        x = x * 1.5 + 1.0
    if bool(x.sum() > 0):
        x = x.relu() * 2.0
    else:
        x = x.sigmoid() - 1.0
    return x


def data_dependent_if(g):
    """The user's ``if`` (not a guard's If): its condition comes from ``aten::Bool``."""
    return next(n for n in g.nodes() if n.kind == "prim::If" and n.inputs[0].node is not None
                and n.inputs[0].node.kind == "aten::Bool")


def test_for_loop_and_data_dependent_if_match_eager():
    sf = graphfuser.script(loop_and_branch)
    pos, neg = torch.rand(4, 8) + 0.1, -torch.rand(4, 8) - 10.0
    for i in range(6):
        for x in (pos, neg):
            for n in (0, 1, 3):
                torch.testing.assert_close(sf(x, n), loop_and_branch(x, n))


def test_loop_body_and_both_branches_fuse():
    sf = graphfuser.script(loop_and_branch)
    pos, neg = torch.rand(4, 8) + 0.1, -torch.rand(4, 8) - 10.0
    sf(pos, 2)
    sf(neg, 2)
    g = sf.graph_for(pos, 2)
    loop = next(n for n in g.nodes() if n.kind == "prim::Loop")
    assert any(n.kind == "prim::CpuFusionGuard" for n in loop.blocks[0].nodes)
    branch = data_dependent_if(g)
    for b in branch.blocks:
        assert any(n.kind == "prim::CpuFusionGuard" for n in b.nodes)
    assert len(fusion_groups(g)) >= 3
    counts = fallback_counter(sf)
    for x in (pos, neg):
        torch.testing.assert_close(sf(x, 4), loop_and_branch(x, 4))
    assert counts["fallback"] == 0
    assert_in_order(sf.code, "while ", "if ", "else:", "if ", "else:")


def test_branch_never_taken_during_profiling():
    sf = graphfuser.script(loop_and_branch)
    pos, neg = torch.rand(4, 8) + 0.1, -torch.rand(4, 8) - 10.0
    for _ in range(3):
        sf(pos, 1)
    # the else branch was never profiled: it runs unfused, correctly
    for _ in range(2):
        torch.testing.assert_close(sf(neg, 1), loop_and_branch(neg, 1))
    g = graphfuser.last_executed_optimized_graph()
    branch = data_dependent_if(g)
    assert not any(n.kind.endswith("FusionGroup") for n in g.all_nodes(branch.blocks[1]))


def test_loop_with_shape_changes():
    def h(x, n: int):
        for _ in range(n):
            x = torch.cat([x, x * 2.0], 0)
        return x.tanh() + 1.0

    sf = graphfuser.script(h)
    x = torch.rand(2, 3)
    for n in (1, 2, 3, 0, 2):
        torch.testing.assert_close(sf(x, n), h(x, n))


def test_while_loop_with_data_dependent_condition():
    def h(x):
        i = 0
        while bool(x.max() < 10.0) and i < 100:
            x = x * 2.0 + 0.5
            i += 1
        return x, i

    sf = graphfuser.script(h)
    for _ in range(4):
        x = torch.rand(4, 4)
        torch.testing.assert_close(sf(x), h(x))


def test_if_returning_outer_values():
    # the If's blocks return values computed before it: those must stay visible after fusion
    def h(x, c: bool):
        a = x.relu()
        b = -a
        if c:
            y = a
        else:
            y = b
        return y * 3.0

    sf = graphfuser.script(h)
    x = torch.randn(4, 8)
    for i in range(5):
        torch.testing.assert_close(sf(x, bool(i % 2)), h(x, bool(i % 2)))


def test_control_flow_from_library_code():
    # F.interpolate's captured graph has deep If nests whose blocks return outer constants
    def h(x):
        return torch.nn.functional.interpolate(x, scale_factor=2.0) * 2.0 + 1.0

    sf = graphfuser.script(h)
    x = torch.rand(1, 2, 4, 4)
    for _ in range(3):
        torch.testing.assert_close(sf(x), h(x))
