"""``with torch.autocast(...)`` inside a model compiled through the backend: each region's state.

Hugging Face's rotary embeddings compute their angles under ``autocast(enabled=False)`` in a model
run under bf16 autocast; the autocast pass once applied the call's state to the whole graph, so
the angles' matmul took bf16 casts (relative error 0.15 against eager on 512 positions).
"""
from __future__ import annotations

import torch

import graphfuser  # noqa: F401 - registers nothing; the backend is passed as a function
from graphfuser.frontend.dynamo import graphfuser_backend


class Rotary(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("inv_freq", 1.0 / (10000 ** (torch.arange(0, 64, 2).float() / 64)))
        self.proj = torch.nn.Linear(64, 64)

    def forward(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        inv = self.inv_freq[None, :, None].expand(pos.shape[0], -1, 1)
        with torch.autocast(x.device.type, enabled=False):
            freqs = (inv.float() @ pos[:, None, :].float()).transpose(1, 2)
            emb = torch.cat((freqs, freqs), dim=-1)
            cos, sin = emb.cos(), emb.sin()
        return self.proj(x * cos.to(x.dtype) + x * sin.to(x.dtype))


class Enabling(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(32, 32)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.tanh(x * 2.0)
        with torch.autocast(x.device.type, dtype=torch.bfloat16):
            a = self.fc(h)
            p = torch.softmax(a * 0.5, dim=-1)      # autocast's fp32 list: fp32 out of bf16 in
        return p * 3.0 + h.sum()


def _compiled(model, *args, ambient: bool):
    torch._dynamo.reset()
    c = torch.compile(model, backend=graphfuser_backend)
    ctx = torch.autocast("cpu", dtype=torch.bfloat16) if ambient else torch.autocast("cpu", enabled=False)
    with torch.no_grad(), ctx:
        want = model(*args)
        for _ in range(4):
            got = c(*args)
    return got, want


def test_a_disabled_region_inside_bf16_autocast_computes_in_float32():
    torch.manual_seed(0)
    x, pos = torch.randn(2, 512, 64), torch.arange(512)[None].expand(2, -1)
    got, want = _compiled(Rotary(), x, pos, ambient=True)
    assert got.dtype == want.dtype == torch.bfloat16
    torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_an_enabled_region_without_ambient_autocast():
    torch.manual_seed(0)
    x = torch.randn(8, 32)
    got, want = _compiled(Enabling(), x, ambient=False)
    assert got.dtype == want.dtype
    torch.testing.assert_close(got, want)
