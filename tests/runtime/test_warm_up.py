"""The CUDA toolchain's warm-up (``runtime/warm_up.py``): an empty kernel compiled by NVRTC,
uncounted, and the launch shim, once per device, with no CUDA call; a failure changes nothing. Runs without a GPU: the driver
is faked, NVRTC is real where its wheel is installed."""
import pytest
import torch

from graphfuser.runtime import cache, cuda_driver, nvrtc, warm_up

_OK, _WHY = nvrtc.available()


class _Device:
    """What the warm-up did: its NVRTC results, the shim builds, and any CUDA call it made."""

    def __init__(self):
        self.cubins, self.shims, self.cuda_calls = [], 0, []


@pytest.fixture
def fake_device(monkeypatch):
    d = _Device()
    run = nvrtc._run_nvrtc
    monkeypatch.setattr(cuda_driver, "device_arch", lambda i: 90)
    monkeypatch.setattr(nvrtc, "_run_nvrtc", lambda *a, **k: d.cubins.append(run(*a, **k)) or d.cubins[-1])

    def shim():
        d.shims += 1

    monkeypatch.setattr(cuda_driver, "shim_launchers", shim)
    for name in ("CudaKernel", "ensure_context"):
        monkeypatch.setattr(cuda_driver, name, lambda *a, _n=name, **k: d.cuda_calls.append(_n))
    monkeypatch.setattr(torch.cuda, "set_device", lambda i: d.cuda_calls.append("set_device"))
    return d


@pytest.mark.skipif(not _OK, reason=f"NVRTC unavailable: {_WHY}")
def test_warm_compiles_an_empty_kernel_uncounted_and_makes_no_cuda_call(fake_device):
    before = dict(cache.STATS)
    assert warm_up.warm(3) is True
    [cubin] = fake_device.cubins
    assert b".text.gf_warm_up\0" in cubin               # a real CUBIN of the kernel
    assert fake_device.shims == 1                      # the launch shim built
    assert fake_device.cuda_calls == []                # (another thread may be capturing a graph)
    assert cache.STATS.get("compiles", 0) == before.get("compiles", 0)   # not a kernel build


def test_warm_reports_failure_and_raises_nothing(fake_device, monkeypatch):
    def refuse(*a, **k):
        raise RuntimeError("no device")

    monkeypatch.setattr(cuda_driver, "device_arch", refuse)
    assert warm_up.warm(0) is False
    assert fake_device.cubins == [] and fake_device.shims == 0


def test_warm_up_runs_once_per_device_on_a_daemon_thread(monkeypatch):
    calls = []
    monkeypatch.setattr(warm_up, "warm", lambda i: calls.append(i) or True)
    monkeypatch.setattr(warm_up, "_STARTED", set())
    t = warm_up.warm_up(7)
    assert t is not None and t.daemon
    t.join(5)
    assert warm_up.warm_up(7) is None
    t2 = warm_up.warm_up(8)
    t2.join(5)
    assert calls == [7, 8]


def test_cuda_inputs_start_it_cpu_inputs_do_not(monkeypatch):
    from graphfuser.executor import start_up

    started = []
    monkeypatch.setattr(warm_up, "warm_up", lambda i: started.append(i))
    start_up.warm_cuda([torch.ones(2), 3, None])
    assert started == []
    start_up.warm_cuda([1, torch.empty(2, device="meta"), torch.empty(2, device="meta")])
    assert started == []
    fake = torch.empty(2, device="meta")
    monkeypatch.setattr(torch.Tensor, "device", property(lambda self: torch.device("cuda", 1)))
    start_up.warm_cuda([2, fake])
    assert started == [1]
