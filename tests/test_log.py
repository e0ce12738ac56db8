"""Logs: opt-in, TorchScript-named; the library adds only a NullHandler."""
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import graphfuser
from graphfuser import log
from graphfuser.config import config
from helpers import assert_in_order

ROOT = Path(__file__).resolve().parents[1]


def f(x, y):
    return (x + y).relu() * 2.0


def run_to_optimization():
    sf = graphfuser.script(f)
    x, y = torch.rand(4, 8), torch.rand(4, 8)
    for _ in range(3):
        sf(x, y)
    return sf


def test_library_adds_only_a_null_handler():
    code = ("import logging, graphfuser; "
            "print([type(h).__name__ for h in logging.getLogger('graphfuser').handlers]); "
            "print(logging.getLogger('graphfuser').propagate)")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTORCH_")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env,
                         cwd=str(ROOT))
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["['NullHandler']", "True"]
    ours = [ln for ln in out.stderr.splitlines() if "graphfuser" in ln and "site-packages/torch" not in ln]
    assert ours == [], out.stderr


def test_graph_fuser_level_prints_before_fusion_and_before_compilation(caplog):
    caplog.set_level(logging.INFO, logger="graphfuser")
    with config.override(log_level="graph_fuser"):
        run_to_optimization()
    text = caplog.text
    assert_in_order(text, "[graph_fuser] Before Fusion:", "aten::add", "aten::relu",
                    "[graph_fuser] Before Compilation:", "prim::CpuFusionGuard", "prim::CpuFusionGroup_0")
    assert "Optimized Graph" not in text


def test_profiling_graph_executor_impl_prints_optimized_graph(caplog):
    caplog.set_level(logging.INFO, logger="graphfuser")
    with config.override(log_level="profiling_graph_executor_impl"):
        run_to_optimization()
    assert_in_order(caplog.text, "[profiling_graph_executor_impl] Profiled Graph:", "Float(4, 8",
                    "[profiling_graph_executor_impl] Optimized Graph:", "prim::CpuFusionGroup_0")
    assert "Before Fusion" not in caplog.text


def test_logs_are_silent_by_default(caplog):
    caplog.set_level(logging.DEBUG, logger="graphfuser")
    run_to_optimization()
    assert not [r for r in caplog.records if r.levelno < logging.WARNING]


def test_levels_nest():
    with config.override(log_level=">partition"):
        assert log.log_enabled("partition", 0) and log.log_enabled("partition", 1)
        assert not log.log_enabled("partition", 2) and not log.log_enabled("graph_fuser", 0)


def test_jit_log_goes_to_the_graphfuser_logger(caplog):
    caplog.set_level(logging.INFO, logger="graphfuser")
    with config.override(log_level=">guard"):
        log.jit_log("guard", 1, "hello")
        log.jit_log("guard", 2, "too verbose")
    assert [r.getMessage() for r in caplog.records] == ["[guard] hello"]
    assert caplog.records[0].name == "graphfuser"


def test_dump_prints_named_dumps_only(capsys):
    log.dump("fusion_ir", "Fusion IR", "graph(...)")
    assert capsys.readouterr().out == ""
    with config.override(dump=["fusion_ir"]):
        log.dump("fusion_ir", "Fusion IR", "graph(...)")
        log.dump("cuda_kernel", "CUDA", "__global__ ...")
    out = capsys.readouterr().out
    assert "===== Fusion IR =====" in out and "graph(...)" in out and "CUDA" not in out


def test_warn_is_a_runtime_warning():
    with pytest.warns(RuntimeWarning, match="something happened"):
        log.warn("something happened")


def test_launch_dump_of_a_kernel_built_without_it(capsys):
    """A kernel compiled while the launch dumps were off gets a launcher of its own when they
    are on: the launches print (pointwise and reduction kernels)."""
    def g(x):
        return (x * 2.0).sum(0), x.relu()

    x = torch.rand(64, 8)
    for dumps in ([], ["launch_param"]):
        sf = graphfuser.script(g)
        with config.override(dump=dumps):
            for _ in range(3):
                sf(x)
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("[launch_param]")]
    assert len(lines) == 1, lines          # one group (sum and relu), fused on the third call
