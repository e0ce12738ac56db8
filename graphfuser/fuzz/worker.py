"""A worker subprocess that runs cases, so that a hang or a hard crash costs one case, not the
campaign: the parent waits ``timeout`` seconds per case, then kills and restarts the worker."""
from __future__ import annotations

import multiprocessing as mp
import os
import tempfile
import traceback
from typing import Any, Optional


def _main(conn: Any, device: str, knobs: dict, env: dict) -> None:
    os.environ.update(env)
    import torch

    torch.set_num_threads(int(env.get("GRAPHFUSER_FUZZ_THREADS", "1")))
    from ..config import config
    from .oracle import run_case

    if env.get("GRAPHFUSER_FUZZ_CUDA_DECISIONS", os.environ.get("GRAPHFUSER_FUZZ_CUDA_DECISIONS")) == "1":
        take_cuda_decisions_on_the_cpu()

    workdir = tempfile.mkdtemp(prefix="graphfuser-fuzz-")
    config.reload()
    config.set(repro_dir=os.path.join(workdir, "repro"), **knobs)
    n = 0
    while True:
        msg = conn.recv()
        if msg is None:
            return
        n += 1
        try:
            res = run_case(msg, device, workdir, f"{os.getpid()}_{n}")
            if device.startswith("cuda"):
                torch.cuda.synchronize()    # an asynchronous kernel fault belongs to this case
        except BaseException as e:  # noqa: BLE001 - a defect of the fuzzer itself, reported as such
            res = {"findings": [{"category": "crash", "call": -1,
                                 "detail": f"oracle: {type(e).__name__}: {e}\n{traceback.format_exc()[-800:]}"}],
                   "deviations": [], "kernel_ran": False, "fused_ops": [], "eager_errors": 0}
        conn.send(res)
        if any("CUDA error" in f["detail"] for f in res["findings"]):
            return      # the context is lost (sticky error): the parent starts a fresh worker


def take_cuda_decisions_on_the_cpu() -> None:
    """The graph rewrites made only for CUDA devices (where eager's cost differs), made for the CPU
    too: their results must equal eager's on either device."""
    from ..passes import bias, row_layout, sdpa_bias, sdpa_math

    bias.ROUTE_DEVICES = tuple(dict.fromkeys(bias.ROUTE_DEVICES + ("cpu",)))
    bias.HALF_CONV_DEVICES = tuple(dict.fromkeys(bias.HALF_CONV_DEVICES + ("cpu",)))
    row_layout.DEVICES = tuple(dict.fromkeys(row_layout.DEVICES + ("cpu",)))
    sdpa_math.DEVICES = tuple(dict.fromkeys(sdpa_math.DEVICES + ("cpu",)))
    sdpa_bias.DEVICES = tuple(dict.fromkeys(sdpa_bias.DEVICES + ("cpu",)))


class Worker:
    """Runs cases in a child process; ``run`` returns the result or a hang/crash finding."""

    def __init__(self, device: str = "cpu", timeout: float = 60.0, knobs: Optional[dict] = None,
                 env: Optional[dict] = None) -> None:
        self.device, self.timeout = device, timeout
        self.knobs, self.env = dict(knobs or {}), dict(env or {})
        self.proc: Optional[mp.process.BaseProcess] = None
        self.conn = None

    def _start(self) -> None:
        ctx = mp.get_context("spawn")
        parent, child = ctx.Pipe()
        self.proc = ctx.Process(target=_main, args=(child, self.device, self.knobs, self.env), daemon=True)
        self.proc.start()
        self.conn = parent

    def run(self, case: dict) -> dict:
        if self.proc is None or not self.proc.is_alive():
            self._start()
        self.conn.send(case)
        if self.conn.poll(self.timeout):
            try:
                res = self.conn.recv()
                if any("CUDA error" in f["detail"] for f in res["findings"]):
                    self.kill()     # the child's context is lost; the next case gets a fresh one
                return res
            except (EOFError, OSError):
                pass
            self.kill()
            return _lost("crash", "worker process died (signal or abort)")
        self.kill()
        return _lost("hang", f"no result within {self.timeout:.0f} s")

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.join()
        self.proc = None

    def close(self) -> None:
        if self.proc is not None and self.proc.is_alive():
            try:
                self.conn.send(None)
                self.proc.join(5)
            except (OSError, EOFError):
                pass
        self.kill()


def _lost(category: str, detail: str) -> dict:
    return {"findings": [{"category": category, "call": -1, "detail": detail}], "deviations": [],
            "kernel_ran": False, "fused_ops": [], "eager_errors": 0}
