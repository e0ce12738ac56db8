import os

# GRAPHFUSER_TEST_GPUS=N spreads pytest-xdist workers over N GPUs of one host, one each (set
# before anything initializes CUDA, which reads CUDA_VISIBLE_DEVICES once)
if os.environ.get("GRAPHFUSER_TEST_GPUS") and os.environ.get("PYTEST_XDIST_WORKER", "").startswith("gw"):
    os.environ["CUDA_VISIBLE_DEVICES"] = str(int(os.environ["PYTEST_XDIST_WORKER"][2:])
                                             % int(os.environ["GRAPHFUSER_TEST_GPUS"]))

import pytest
import torch

HAS_CUDA = torch.cuda.is_available()


def pytest_configure(config):
    config.addinivalue_line("markers", "cuda: needs an NVIDIA GPU (skipped, with a reason, where none is present)")


def pytest_collection_modifyitems(config, items):
    if HAS_CUDA:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU: none on this machine (CI has none); run on the GPU machine")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory, monkeypatch):
    """Every test session compiles into its own kernel cache directory."""
    root = tmp_path_factory.getbasetemp() / "kernel-cache"
    monkeypatch.setenv("GRAPHFUSER_CACHE_DIR", str(root))
    from graphfuser.config import config

    saved = config.as_dict()
    # repros of failing fusions go to the session's temp dir, not the repository's logs/
    config.set(cache_dir=str(root), repro_dir=str(tmp_path_factory.getbasetemp() / "repro"))
    yield
    config._values = saved
    config._validate()
