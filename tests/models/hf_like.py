"""Small GPT-2-, BERT- and Llama-like models, written the way Hugging Face writes them.

What they exercise through ``torch.compile(backend="graphfuser")``: embeddings, LayerNorm and
RMSNorm (``x.float().pow(2).mean(-1, keepdim=True)``), rotary embeddings computed under
``torch.autocast(enabled=False)`` (Dynamo's ``_enter_autocast`` / ``_exit_autocast`` nodes),
grouped-query attention (``repeat_kv``: expand + reshape), SwiGLU, GELU (tanh and erf), causal
and padding masks (``masked_fill`` with ``finfo.min``, an additive extended mask), SDPA and
hand-written attention, dropout, tied weights. Random weights, no downloads.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class Config:
    vocab: int = 96
    hidden: int = 32
    heads: int = 4
    kv_heads: int = 2
    layers: int = 2
    intermediate: int = 64
    max_positions: int = 64
    dropout: float = 0.0
    eps: float = 1e-5


# -- GPT-2 ------------------------------------------------------------------------------------
class GPT2Attention(nn.Module):
    def __init__(self, c: Config) -> None:
        super().__init__()
        self.heads, self.dim = c.heads, c.hidden // c.heads
        self.c_attn = nn.Linear(c.hidden, 3 * c.hidden)
        self.c_proj = nn.Linear(c.hidden, c.hidden)
        self.attn_dropout = nn.Dropout(c.dropout)
        self.resid_dropout = nn.Dropout(c.dropout)
        self.register_buffer("bias", torch.tril(torch.ones(c.max_positions, c.max_positions, dtype=torch.bool))
                             .view(1, 1, c.max_positions, c.max_positions), persistent=False)

    def forward(self, x: torch.Tensor, padding: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.c_attn(x).split(d, dim=2)
        q = q.view(b, t, self.heads, self.dim).transpose(1, 2)
        k = k.view(b, t, self.heads, self.dim).transpose(1, 2)
        v = v.view(b, t, self.heads, self.dim).transpose(1, 2)
        w = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.dim)
        causal = self.bias[:, :, :t, :t]
        w = torch.where(causal, w, torch.tensor(torch.finfo(w.dtype).min, dtype=w.dtype, device=w.device))
        w = w + padding
        w = self.attn_dropout(F.softmax(w, dim=-1))
        y = torch.matmul(w, v).transpose(1, 2).contiguous().view(b, t, d)
        return self.resid_dropout(self.c_proj(y))


class GPT2Block(nn.Module):
    def __init__(self, c: Config) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(c.hidden, eps=c.eps)
        self.attn = GPT2Attention(c)
        self.ln_2 = nn.LayerNorm(c.hidden, eps=c.eps)
        self.c_fc = nn.Linear(c.hidden, c.intermediate)
        self.c_proj = nn.Linear(c.intermediate, c.hidden)
        self.dropout = nn.Dropout(c.dropout)

    def forward(self, x: torch.Tensor, padding: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x), padding)
        h = F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh")
        return x + self.dropout(self.c_proj(h))


class GPT2Like(nn.Module):
    def __init__(self, c: Config = Config()) -> None:
        super().__init__()
        self.wte = nn.Embedding(c.vocab, c.hidden)
        self.wpe = nn.Embedding(c.max_positions, c.hidden)
        self.drop = nn.Dropout(c.dropout)
        self.h = nn.ModuleList(GPT2Block(c) for _ in range(c.layers))
        self.ln_f = nn.LayerNorm(c.hidden, eps=c.eps)
        self.lm_head = nn.Linear(c.hidden, c.vocab, bias=False)
        self.lm_head.weight = self.wte.weight

    def forward(self, ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        t = ids.shape[1]
        pos = torch.arange(0, t, dtype=torch.long, device=ids.device).unsqueeze(0)
        x = self.drop(self.wte(ids) + self.wpe(pos))
        padding = (1.0 - attention_mask[:, None, None, :].to(x.dtype)) * torch.finfo(x.dtype).min
        for block in self.h:
            x = block(x, padding)
        return self.lm_head(self.ln_f(x))


# -- BERT -------------------------------------------------------------------------------------
class BertLayer(nn.Module):
    def __init__(self, c: Config) -> None:
        super().__init__()
        self.heads, self.dim, self.p = c.heads, c.hidden // c.heads, c.dropout
        self.query = nn.Linear(c.hidden, c.hidden)
        self.key = nn.Linear(c.hidden, c.hidden)
        self.value = nn.Linear(c.hidden, c.hidden)
        self.out = nn.Linear(c.hidden, c.hidden)
        self.ln1 = nn.LayerNorm(c.hidden, eps=1e-12)
        self.inter = nn.Linear(c.hidden, c.intermediate)
        self.output = nn.Linear(c.intermediate, c.hidden)
        self.ln2 = nn.LayerNorm(c.hidden, eps=1e-12)
        self.drop = nn.Dropout(c.dropout)

    def heads_of(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        return x.view(b, t, self.heads, self.dim).permute(0, 2, 1, 3)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.heads_of(self.query(x)), self.heads_of(self.key(x)), self.heads_of(self.value(x))
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=self.p if self.training else 0.0)
        a = a.permute(0, 2, 1, 3).reshape(b, t, d)
        x = self.ln1(self.drop(self.out(a)) + x)
        h = F.gelu(self.inter(x))
        return self.ln2(self.drop(self.output(h)) + x)


class BertLike(nn.Module):
    def __init__(self, c: Config = Config()) -> None:
        super().__init__()
        self.word = nn.Embedding(c.vocab, c.hidden, padding_idx=0)
        self.position = nn.Embedding(c.max_positions, c.hidden)
        self.token_type = nn.Embedding(2, c.hidden)
        self.ln = nn.LayerNorm(c.hidden, eps=1e-12)
        self.drop = nn.Dropout(c.dropout)
        self.layers = nn.ModuleList(BertLayer(c) for _ in range(c.layers))
        self.pooler = nn.Linear(c.hidden, c.hidden)
        self.register_buffer("position_ids", torch.arange(c.max_positions).expand((1, -1)), persistent=False)

    def forward(self, ids: torch.Tensor, attention_mask: torch.Tensor,
                token_type_ids: Optional[torch.Tensor] = None) -> tuple[torch.Tensor, torch.Tensor]:
        t = ids.shape[1]
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(ids)
        x = self.word(ids) + self.token_type(token_type_ids) + self.position(self.position_ids[:, :t])
        x = self.drop(self.ln(x))
        ext = (1.0 - attention_mask[:, None, None, :].to(x.dtype)) * torch.finfo(x.dtype).min
        for layer in self.layers:
            x = layer(x, ext)
        return x, torch.tanh(self.pooler(x[:, 0]))


# -- Llama ------------------------------------------------------------------------------------
class RMSNorm(nn.Module):
    def __init__(self, d: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x = x.to(torch.float32)
        var = x.pow(2).mean(-1, keepdim=True)
        x = x * torch.rsqrt(var + self.eps)
        return self.weight * x.to(dtype)


class Rotary(nn.Module):
    def __init__(self, dim: int, base: float = 10000.0) -> None:
        super().__init__()
        inv = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
        self.register_buffer("inv_freq", inv, persistent=False)

    @torch.no_grad()
    def forward(self, x: torch.Tensor, position_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        inv = self.inv_freq[None, :, None].float().expand(position_ids.shape[0], -1, 1).to(x.device)
        pos = position_ids[:, None, :].float()
        with torch.autocast(device_type=x.device.type, enabled=False):
            freqs = (inv.float() @ pos.float()).transpose(1, 2)
            emb = torch.cat((freqs, freqs), dim=-1)
            cos, sin = emb.cos(), emb.sin()
        return cos.to(dtype=x.dtype), sin.to(dtype=x.dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def repeat_kv(x: torch.Tensor, n: int) -> torch.Tensor:
    b, h, t, d = x.shape
    if n == 1:
        return x
    return x[:, :, None, :, :].expand(b, h, n, t, d).reshape(b, h * n, t, d)


class LlamaAttention(nn.Module):
    def __init__(self, c: Config) -> None:
        super().__init__()
        self.heads, self.kv, self.dim, self.p = c.heads, c.kv_heads, c.hidden // c.heads, c.dropout
        self.q_proj = nn.Linear(c.hidden, c.heads * self.dim, bias=False)
        self.k_proj = nn.Linear(c.hidden, c.kv_heads * self.dim, bias=False)
        self.v_proj = nn.Linear(c.hidden, c.kv_heads * self.dim, bias=False)
        self.o_proj = nn.Linear(c.heads * self.dim, c.hidden, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, -1, self.dim).transpose(1, 2)
        k = self.k_proj(x).view(b, t, -1, self.dim).transpose(1, 2)
        v = self.v_proj(x).view(b, t, -1, self.dim).transpose(1, 2)
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k, v = repeat_kv(k, self.heads // self.kv), repeat_kv(v, self.heads // self.kv)
        w = torch.matmul(q, k.transpose(2, 3)) * self.dim ** -0.5
        w = w + mask
        w = F.softmax(w, dim=-1, dtype=torch.float32).to(q.dtype)
        w = F.dropout(w, p=self.p, training=self.training)
        y = torch.matmul(w, v).transpose(1, 2).reshape(b, t, -1)
        return self.o_proj(y)


class LlamaMLP(nn.Module):
    def __init__(self, c: Config) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(c.hidden, c.intermediate, bias=False)
        self.up_proj = nn.Linear(c.hidden, c.intermediate, bias=False)
        self.down_proj = nn.Linear(c.intermediate, c.hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class LlamaLayer(nn.Module):
    def __init__(self, c: Config) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(c.hidden, c.eps)
        self.self_attn = LlamaAttention(c)
        self.post_attention_layernorm = RMSNorm(c.hidden, c.eps)
        self.mlp = LlamaMLP(c)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, mask)
        return x + self.mlp(self.post_attention_layernorm(x))


class LlamaLike(nn.Module):
    def __init__(self, c: Config = Config()) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(c.vocab, c.hidden)
        self.layers = nn.ModuleList(LlamaLayer(c) for _ in range(c.layers))
        self.norm = RMSNorm(c.hidden, c.eps)
        self.rotary_emb = Rotary(c.hidden // c.heads)
        self.lm_head = nn.Linear(c.hidden, c.vocab, bias=False)

    def forward(self, ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        b, t = ids.shape
        x = self.embed_tokens(ids)
        position_ids = torch.arange(t, device=ids.device).unsqueeze(0).expand(b, -1)
        cos, sin = self.rotary_emb(x, position_ids)
        minimum = torch.finfo(x.dtype).min
        causal = torch.full((t, t), minimum, dtype=x.dtype, device=x.device).triu(1)
        mask = causal[None, None, :, :].expand(b, 1, t, t).clone()
        padding = attention_mask[:, None, None, :] == 0
        mask = mask.masked_fill(padding, minimum)
        for layer in self.layers:
            x = layer(x, cos, sin, mask)
        return self.lm_head(self.norm(x))


MODELS = {"gpt2": GPT2Like, "bert": BertLike, "llama": LlamaLike}


def inputs(batch: int, seq: int, vocab: int = Config.vocab, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids and an attention mask with right padding on every other row."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, vocab, (batch, seq), generator=g)
    mask = torch.ones(batch, seq, dtype=torch.long)
    mask[1::2, seq - max(1, seq // 4):] = 0
    return ids, mask
