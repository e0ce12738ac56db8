"""Which optimized graphs may be replayed as CUDA graphs (graphfuser/executor/cuda_graphs.py): the
static part of the decision, checked on CPU-profiled graphs (the rule does not depend on the device)."""
import torch
import torch.nn as nn
import torch.nn.functional as F

import graphfuser
from graphfuser.executor.cuda_graphs import _chains, ineligible_reason


def _optimized(fn, *args, grad=False):
    sf = graphfuser.script(fn)
    with torch.set_grad_enabled(grad):
        for _ in range(4):
            sf(*args)
    return sf, sf._optimized


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.drop = nn.Dropout(0.5)

    def forward(self, x):
        return self.drop(F.relu(self.bn(self.conv(x)), inplace=True)).mean([2, 3])


def test_eval_block_is_eligible_and_its_attribute_chains_are_known():
    m = Block().eval()
    sf, g = _optimized(m, torch.randn(2, 3, 8, 8))
    assert ineligible_reason(g, True) is None
    names = [n for _, n in _chains(g, True)]
    assert "conv" in names and "weight" in names and "running_mean" in names


def test_training_block_updates_module_buffers_in_place_which_replays():
    # running stats and num_batches_tracked are module buffers: a replay writes them at the same
    # address (the key checks it); its dropout draws, which the capture refuses at run time
    m = Block().train()
    _, g = _optimized(m, torch.randn(2, 3, 8, 8))
    assert ineligible_reason(g, True) is None


def test_running_stats_passed_as_arguments_are_not_eligible():
    def f(x, rm, rv):
        return F.batch_norm(x, rm, rv, training=True) + 1

    _, g = _optimized(f, torch.randn(4, 3), torch.zeros(3), torch.ones(3))
    assert ineligible_reason(g, False) is not None


def test_random_ops_are_checked_per_capture_not_statically():
    # a dropout in eval or an untaken stochastic-depth branch draws nothing: the capture checks
    # the generators instead (tests/cuda/test_cuda_graphs.py)
    def f(x):
        return torch.rand_like(x) + x

    _, g = _optimized(f, torch.randn(8))
    assert ineligible_reason(g, False) is None


def test_write_into_an_input_is_not_eligible():
    def f(x):
        y = x * 2
        x.add_(1)
        return y

    _, g = _optimized(f, torch.randn(8))
    assert "in-place" in ineligible_reason(g, False)


def test_write_into_a_view_of_an_input_is_not_eligible():
    def f(x):
        v = x.view(-1)
        v.mul_(2)
        return x + 1

    _, g = _optimized(f, torch.randn(2, 4))
    assert "in-place" in ineligible_reason(g, False)


def test_write_into_a_fresh_intermediate_is_eligible():
    def f(x):
        y = x * 2
        y.relu_()
        return y + 1

    _, g = _optimized(f, torch.randn(8))
    assert ineligible_reason(g, False) is None


def test_list_built_by_the_graph_is_eligible_an_input_list_is_not():
    def built(x):
        out = []
        for i in range(3):
            out.append(x * i)
        return out[0] + out[2]

    _, g = _optimized(built, torch.randn(8))
    assert ineligible_reason(g, False) is None

    def into_input(x, xs: list[torch.Tensor]):
        xs.append(x + 1)
        return x * 2

    _, g = _optimized(into_input, torch.randn(8), [torch.randn(8)])
    assert "list" in ineligible_reason(g, False)


def test_print_is_not_eligible():
    def f(x):
        print("hello")
        return x + 1

    _, g = _optimized(f, torch.randn(8))
    assert "side effect" in ineligible_reason(g, False)


class BiasCache(nn.Module):
    """LeViT's attention biases: computed once per device and kept in a dict attribute."""
    cache: dict[str, torch.Tensor]

    def __init__(self):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(4, 6))
        self.register_buffer("idx", torch.tensor([0, 2, 4, 5]), persistent=False)
        self.cache: dict[str, torch.Tensor] = {}

    def forward(self, x):
        key = str(x.device)
        if key not in self.cache:
            self.cache[key] = self.bias[:, self.idx]
        return x + self.cache[key]


def test_write_into_a_module_dict_cache_is_eligible_and_keyed_by_its_items():
    from graphfuser.executor.cuda_graphs import _container_state

    m = BiasCache().eval()
    _, g = _optimized(m, torch.randn(3, 4, 4))
    assert ineligible_reason(g, True) is None
    assert "cache" in [n for _, n in _chains(g, True)]
    empty = _container_state({})
    t = torch.randn(2)
    assert empty != _container_state({"cpu": t})
    assert _container_state({"a": 1, "b": [1, 2]}) == (dict, (("a", (int, 1)), ("b", (list, ((int, 1), (int, 2))))))
    assert _container_state({"a": object()}) is None


def test_write_into_a_dict_argument_is_not_eligible():
    def f(x, d: dict[str, torch.Tensor]):
        d["y"] = x + 1
        return x * 2

    _, g = _optimized(f, torch.randn(8), {"a": torch.randn(8)})
    assert "dict" in ineligible_reason(g, False)


def _one_group(x):
    return (x * 2.0).relu() + 1.0


def _group_and_cumsum(x):
    y = (x * 2.0).relu() + 1.0
    return y, torch.cumsum(y, 0)


def test_launch_count_of_optimized_graphs():
    """A function of one fused group launches one kernel (its guard's fallback graph is not
    counted): CUDA graph replay cannot enqueue it faster, so it gets no replayer; an aten op
    beside the group makes two."""
    import graphfuser
    from graphfuser.executor.replay_eligibility import launches

    counts = []
    for fn in (_one_group, _group_and_cumsum):
        sf = graphfuser.script(fn)
        for _ in range(3):
            sf(torch.randn(64))
        counts.append(launches(sf._optimized))
    assert counts == [1, 2]
