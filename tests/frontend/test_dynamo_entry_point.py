"""``torch.compile(m, backend="graphfuser")`` in a process that never imports graphfuser: the
``torch_dynamo_backends`` entry point declared in pyproject.toml finds it."""
from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import graphfuser
from graphfuser.frontend import dynamo

try:
    import tomllib
except ImportError:  # Python < 3.11
    tomllib = None

ROOT = Path(__file__).resolve().parents[2]
ENTRY = "graphfuser.frontend.dynamo:graphfuser_backend"
GROUP = "torch_dynamo_backends"


def _declared() -> dict:
    if tomllib is None:
        pytest.skip("reading pyproject.toml needs tomllib (Python 3.11+)")
    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["project"]["entry-points"][GROUP]


def test_pyproject_declares_a_plain_function():
    assert _declared() == {"graphfuser": ENTRY}
    assert dynamo.graphfuser_backend.__module__ == "graphfuser.frontend.dynamo"
    assert not hasattr(dynamo.graphfuser_backend, "__wrapped__")
    # importing graphfuser registers nothing: Dynamo would see the name twice when the entry
    # point loads it. Checked in a fresh process: in this one another test may have compiled by
    # the name already (the zoo's and race's tools do), which registers it as it should.
    check = ("import graphfuser\n"
             "from graphfuser.frontend import dynamo\n"
             "from torch._dynamo.backends import registry\n"
             "assert dynamo.graphfuser_backend not in registry._COMPILER_FNS.values()\n"
             "assert 'graphfuser' not in registry._COMPILER_FNS\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    proc = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert graphfuser.__name__ == "graphfuser"


# What the fresh process runs: one of the CI models by backend name, inference at two shapes
# (marked dynamic) and training gradients against eager, fusion groups in the optimized graph.
SCRIPT = textwrap.dedent("""
    import copy, sys
    import torch
    assert "graphfuser" not in sys.modules
    assert "graphfuser" in torch._dynamo.list_backends()
    assert "graphfuser" not in sys.modules
    sys.path.insert(0, {models!r})
    from hf_like import GPT2Like, Config, inputs
    torch.manual_seed(0)
    m = GPT2Like(Config(layers=1)).eval()
    c = torch.compile(m, backend="graphfuser")
    with torch.no_grad():
        for b, t in ((2, 8), (3, 11)):
            ids, mask = inputs(b, t)
            for x in (ids, mask):           # symbolic from the start: one trace for both shapes
                torch._dynamo.mark_dynamic(x, 0)
                torch._dynamo.mark_dynamic(x, 1)
            for _ in range(3):
                torch.testing.assert_close(c(ids, mask), m(ids, mask))
    gf = sys.modules["graphfuser"]
    assert gf.__file__.startswith({root!r}), gf.__file__
    assert "prim::CpuFusionGroup" in str(gf.last_executed_optimized_graph())
    torch._dynamo.reset()
    m.train()
    ref = copy.deepcopy(m)
    c = torch.compile(m, backend="graphfuser")
    for step in range(3):
        ids, mask = inputs(2, 8, seed=step)
        c(ids, mask).pow(2).mean().backward()
        ref(ids, mask).pow(2).mean().backward()
        for p, q in zip(m.parameters(), ref.parameters()):
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-6)
        m.zero_grad(); ref.zero_grad()
    assert "prim::DifferentiableGraph" in str(gf.last_executed_optimized_graph())
    print("fresh process OK")
""")


def _run(script: str, path: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(path + [env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["GRAPHFUSER_CACHE_DIR"] = str(tmp_path / "kernel-cache")
    return subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600,
                          cwd=str(tmp_path))


def test_fresh_process_through_the_entry_point(tmp_path):
    """Install-free: the entry point that pyproject.toml declares, as an installed distribution's
    metadata on the path, with this tree's graphfuser first on the path."""
    dist = tmp_path / "site" / "graphfuser_entry_point-0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: graphfuser-entry-point\nVersion: 0\n")
    (dist / "entry_points.txt").write_text(
        f"[{GROUP}]\n" + "".join(f"{k} = {v}\n" for k, v in _declared().items()))
    script = SCRIPT.format(models=str(ROOT / "tests" / "models"), root=str(ROOT))
    proc = _run(script, [str(ROOT), str(tmp_path / "site")], tmp_path)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "fresh process OK" in proc.stdout


def test_installed_entry_point_is_listed(tmp_path):
    """After ``pip install -e .`` (``make setup``): Dynamo lists the backend without importing
    graphfuser, and loading it gives this function."""
    found = [ep for ep in importlib.metadata.entry_points(group=GROUP) if ep.name == "graphfuser"]
    if not found:
        pytest.skip("graphfuser is not installed with its torch_dynamo_backends entry point in this "
                    "environment (run `make setup`, which installs it with `pip install -e .[test]`)")
    assert found[0].value == ENTRY
    script = textwrap.dedent("""
        import sys, torch
        assert "graphfuser" in torch._dynamo.list_backends(), torch._dynamo.list_backends()
        assert "graphfuser" not in sys.modules
        f = torch.compile(lambda x: (x * 2.0).relu() + 1.0, backend="graphfuser")
        x = torch.randn(8)
        for _ in range(3):
            torch.testing.assert_close(f(x), (x * 2.0).relu() + 1.0)
        print("installed OK")
    """)
    proc = _run(script, [str(ROOT)], tmp_path)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "installed OK" in proc.stdout
