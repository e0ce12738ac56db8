"""Repros of failing fusions never land in the working directory (issue 10, class 13)."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import torch

from graphfuser.config import config
from graphfuser.executor.compiled import repro_root, write_repro
from graphfuser.ir import parse_graph


def test_default_repro_dir_is_under_the_cache(tmp_path):
    with config.override(repro_dir=None, cache_dir=str(tmp_path / "cache")):
        assert repro_root() == str(tmp_path / "cache" / "repro")
    with config.override(repro_dir=str(tmp_path / "mine")):
        assert repro_root() == str(tmp_path / "mine")


def test_write_repro_uses_the_cache_dir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    g = parse_graph("graph(%x : Float(2, strides=[1], requires_grad=0, device=cpu)):\n"
                    "  %y : Float(2, strides=[1], requires_grad=0, device=cpu) = aten::relu(%x)\n"
                    "  return (%y)\n")
    with config.override(repro_dir=None, cache_dir=str(tmp_path / "cache")):
        path = write_repro("g", g, "", RuntimeError("boom"))
    assert path.startswith(str(tmp_path / "cache" / "repro"))
    assert not (tmp_path / "logs").exists()


def test_import_and_use_leave_the_cwd_alone(tmp_path):
    """A fresh process: import, script, run past profiling; nothing appears in the cwd."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    code = textwrap.dedent("""
        import torch, graphfuser
        def f(x):
            return (x + 1.0).relu()
        sf = graphfuser.script(f)
        for _ in range(4):
            sf(torch.randn(8))
    """)
    env = dict(os.environ, PYTHONPATH=root, GRAPHFUSER_CACHE_DIR=str(tmp_path / "cache"))
    work = tmp_path / "work"
    work.mkdir()
    (tmp_path / "prog.py").write_text(code)
    subprocess.run([sys.executable, str(tmp_path / "prog.py")], cwd=work, env=env, check=True, timeout=300)
    assert list(work.iterdir()) == []
