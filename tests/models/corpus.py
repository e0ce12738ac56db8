"""The pieces real models are built from, written with torch.nn as model code writes them.

Each entry of ``CORPUS`` is a ``Case``: how to build the module, how to make inputs for a batch
size, and whether a fusion group is expected (``True``), not expected (``False``: nothing
pointwise to fuse), or expected but blocked today (a string: the reason, an xfail).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Tuple, Union

import torch
import torch.nn as nn
import torch.nn.functional as F


class BasicBlock(nn.Module):
    """ResNet basic block: conv-bn-relu, conv-bn, residual add, relu."""

    def __init__(self, c: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(c, c, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(c)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(c, c, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(c)
        self.downsample: Optional[nn.Module] = None if stride == 1 else nn.Sequential(
            nn.Conv2d(c, c, 1, stride, bias=False), nn.BatchNorm2d(c))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        if self.downsample is not None:
            identity = self.downsample(x)
        out += identity
        return self.relu(out)


class Bottleneck(nn.Module):
    def __init__(self, c: int, mid: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(c, mid, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(mid)
        self.conv2 = nn.Conv2d(mid, mid, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(mid)
        self.conv3 = nn.Conv2d(mid, c, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(c)
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + x)


class SqueezeExcite(nn.Module):
    def __init__(self, c: int, r: int = 4) -> None:
        super().__init__()
        self.fc1 = nn.Conv2d(c, c // r, 1)
        self.fc2 = nn.Conv2d(c // r, c, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = F.adaptive_avg_pool2d(x, 1)
        s = self.fc2(F.relu(self.fc1(s)))
        return x * F.hardsigmoid(s)


class InvertedResidual(nn.Module):
    """MobileNetV3 block: expand 1x1, depthwise 3x3, squeeze-excite, project, residual."""

    def __init__(self, c: int, expand: int = 4) -> None:
        super().__init__()
        h = c * expand
        self.block = nn.Sequential(
            nn.Conv2d(c, h, 1, bias=False), nn.BatchNorm2d(h), nn.Hardswish(),
            nn.Conv2d(h, h, 3, padding=1, groups=h, bias=False), nn.BatchNorm2d(h), nn.Hardswish(),
            SqueezeExcite(h),
            nn.Conv2d(h, c, 1, bias=False), nn.BatchNorm2d(c))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.block(x)


class LayerNorm2d(nn.LayerNorm):
    """ConvNeXt's LayerNorm over channels: permute to channels-last, normalize, permute back."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.permute(0, 2, 3, 1)
        x = F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)
        return x.permute(0, 3, 1, 2)


class ConvNeXtBlock(nn.Module):
    def __init__(self, c: int) -> None:
        super().__init__()
        self.dwconv = nn.Conv2d(c, c, 7, padding=3, groups=c)
        self.norm = nn.LayerNorm(c, eps=1e-6)
        self.pwconv1 = nn.Linear(c, 4 * c)
        self.act = nn.GELU()
        self.pwconv2 = nn.Linear(4 * c, c)
        self.gamma = nn.Parameter(1e-1 * torch.ones(c))
        self.norm2d = LayerNorm2d(c)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shortcut = x
        x = self.dwconv(x).permute(0, 2, 3, 1)
        x = self.pwconv2(self.act(self.pwconv1(self.norm(x))))
        x = self.gamma * x
        return self.norm2d(shortcut + x.permute(0, 3, 1, 2))


class Mlp(nn.Module):
    def __init__(self, d: int, h: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(d, h)
        self.act = nn.GELU()
        self.drop = nn.Dropout(0.0)
        self.fc2 = nn.Linear(h, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.drop(self.act(self.fc1(x))))


class ViTBlockMHA(nn.Module):
    def __init__(self, d: int = 32, heads: int = 4) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.norm2 = nn.LayerNorm(d)
        self.mlp = Mlp(d, 4 * d)
        self.ls = nn.Parameter(torch.full((d,), 0.5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.norm1(x)
        x = x + self.attn(y, y, y, need_weights=False)[0]
        return x + self.ls * self.mlp(self.norm2(x))


class Attention(nn.Module):
    """Hand-written attention (timm's): qkv projection, reshape/permute, scaled softmax."""

    def __init__(self, d: int = 32, heads: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.scale = (d // heads) ** -0.5
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, c = x.shape
        qkv = self.qkv(x).reshape(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        attn = (q * self.scale) @ k.transpose(-2, -1)
        attn = attn.softmax(dim=-1)
        x = (attn @ v).transpose(1, 2).reshape(b, n, c)
        return self.proj(x)


class ViTBlockHand(nn.Module):
    def __init__(self, d: int = 32) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(d)
        self.attn = Attention(d)
        self.norm2 = nn.LayerNorm(d)
        self.mlp = Mlp(d, 4 * d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class GPT2Block(nn.Module):
    def __init__(self, d: int = 32, heads: int = 4, ctx: int = 16) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(d)
        self.c_attn = nn.Linear(d, 3 * d)
        self.c_proj = nn.Linear(d, d)
        self.ln_2 = nn.LayerNorm(d)
        self.c_fc = nn.Linear(d, 4 * d)
        self.mlp_proj = nn.Linear(4 * d, d)
        self.heads = heads
        self.register_buffer("bias", torch.tril(torch.ones(ctx, ctx)).view(1, 1, ctx, ctx))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.size()
        q, k, v = self.c_attn(self.ln_1(x)).split(c, dim=2)
        h = self.heads
        q = q.view(b, t, h, c // h).transpose(1, 2)
        k = k.view(b, t, h, c // h).transpose(1, 2)
        v = v.view(b, t, h, c // h).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :t, :t] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(b, t, c)
        x = x + self.c_proj(y)
        m = self.c_fc(self.ln_2(x))
        m = 0.5 * m * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (m + 0.044715 * torch.pow(m, 3.0))))
        return x + self.mlp_proj(m)


class RMSNorm(nn.Module):
    def __init__(self, d: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d) + 0.1 * torch.randn(d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class SwiGLU(nn.Module):
    def __init__(self, d: int, h: int) -> None:
        super().__init__()
        self.w1 = nn.Linear(d, h, bias=False)
        self.w3 = nn.Linear(d, h, bias=False)
        self.w2 = nn.Linear(h, d, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class LlamaLayer(nn.Module):
    def __init__(self, d: int = 32) -> None:
        super().__init__()
        self.norm = RMSNorm(d)
        self.ffn = SwiGLU(d, 64)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.ffn(self.norm(x))


class LSTMCellLoop(nn.Module):
    """A hand-written LSTM cell unrolled over time in a loop that carries a list of outputs."""

    def __init__(self, i: int = 8, h: int = 16) -> None:
        super().__init__()
        self.ih = nn.Linear(i, 4 * h)
        self.hh = nn.Linear(h, 4 * h)
        self.h = h

    def forward(self, xs: torch.Tensor) -> Tuple[torch.Tensor, List[torch.Tensor]]:
        hx = xs.new_zeros(xs.size(1), self.h)
        cx = xs.new_zeros(xs.size(1), self.h)
        outs: List[torch.Tensor] = []
        for t in range(xs.size(0)):
            gates = self.ih(xs[t]) + self.hh(hx)
            i, f, g, o = gates.chunk(4, 1)
            cx = torch.sigmoid(f) * cx + torch.sigmoid(i) * torch.tanh(g)
            hx = torch.sigmoid(o) * torch.tanh(cx)
            outs.append(hx)
        return torch.stack(outs), outs


class RNNHead(nn.Module):
    def __init__(self, kind: str) -> None:
        super().__init__()
        self.rnn = nn.LSTM(8, 16, 2, batch_first=True) if kind == "lstm" else nn.GRU(8, 16, batch_first=True)
        self.out = nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y, _ = self.rnn(x)
        return torch.tanh(self.out(y)) * 2.0 + 1.0


class BNDropTrain(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(16, 16)
        self.bn = nn.BatchNorm1d(16)
        self.drop = nn.Dropout(0.25)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop(torch.relu(self.bn(self.fc(x)))) * 2.0 + 1.0


class InPlace(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.fc(x)
        y.mul_(2.0).add_(1.0)
        y = F.relu(y, inplace=True)
        y.clamp_(max=3.0)
        return y * x


class OptionalArgs(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor, mask: Optional[torch.Tensor] = None, scale: Optional[float] = None):
        y = self.fc(x)
        if mask is not None:
            y = y * mask
        if scale is not None:
            y = y * scale
        return torch.sigmoid(y) + 1.0


class TupleDictOut(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> Tuple[torch.Tensor, Dict[str, torch.Tensor]]:
        y = self.fc(x)
        z = torch.relu(y) * 2.0 + 1.0
        out: Dict[str, torch.Tensor] = {"logits": y, "act": z}
        out["sum"] = z + y
        return z.tanh(), out


class ListIn(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fcs = nn.ModuleList([nn.Linear(8, 8) for _ in range(3)])

    def forward(self, xs: List[torch.Tensor]) -> torch.Tensor:
        acc = torch.zeros_like(xs[0])
        for i, fc in enumerate(self.fcs):
            acc = acc + torch.relu(fc(xs[i])) * 0.5
        return acc


class Stack(nn.Module):
    """Sequential / ModuleList stacks: children named "0", "1", ..."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU())
        self.blocks = nn.ModuleList([BasicBlock(8), BasicBlock(8, stride=2)])
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        for b in self.blocks:
            x = b(x)
        return self.head(x)


class VGGLike(nn.Module):
    """vgg / alexnet: conv(bias) -> relu(inplace) -> maxpool; linear -> relu(inplace) -> dropout.
    The bias adds leave the convs / linears and fuse with the ReLUs."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(inplace=True), nn.MaxPool2d(2),
                                      nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(inplace=True), nn.MaxPool2d(2))
        self.avgpool = nn.AdaptiveAvgPool2d((2, 2))
        self.classifier = nn.Sequential(nn.Dropout(), nn.Linear(32, 16), nn.ReLU(inplace=True), nn.Dropout(),
                                        nn.Linear(16, 5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


class Fire(nn.Module):
    """squeezenet's fire module: squeeze conv -> relu, two expand convs -> relu, concatenated."""

    def __init__(self, c: int = 8) -> None:
        super().__init__()
        self.squeeze = nn.Conv2d(c, 4, 1)
        self.squeeze_activation = nn.ReLU(inplace=True)
        self.expand1x1 = nn.Conv2d(4, 8, 1)
        self.expand1x1_activation = nn.ReLU(inplace=True)
        self.expand3x3 = nn.Conv2d(4, 8, 3, padding=1)
        self.expand3x3_activation = nn.ReLU(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.squeeze_activation(self.squeeze(x))
        return torch.cat([self.expand1x1_activation(self.expand1x1(x)),
                          self.expand3x3_activation(self.expand3x3(x))], 1)


@dataclass
class Case:
    name: str
    make: Callable[[], nn.Module]
    inputs: Callable[[int], tuple]
    fuses: Union[bool, str] = True      # a string: expected but blocked today (xfail reason)
    train: bool = False
    grad: bool = False                  # run with autograd on (training-mode cases)


def img(c: int, s: int) -> Callable[[int], tuple]:
    return lambda b: (torch.randn(b, c, s, s),)


def seq(n: int, d: int) -> Callable[[int], tuple]:
    return lambda b: (torch.randn(b, n, d),)


SOFTMAX = "F.softmax's dim reaches the graph as prim::unchecked_cast, which the partition rejects"

CORPUS: list[Case] = [
    Case("sequential_stack", Stack, img(3, 8)),
    Case("vgg_like", VGGLike, img(3, 8)),
    Case("squeezenet_fire", Fire, img(8, 6)),
    Case("resnet_basic", lambda: BasicBlock(8, stride=2), img(8, 8)),
    Case("resnet_bottleneck", lambda: Bottleneck(16, 4), img(16, 6)),
    Case("mobilenetv3_inverted_residual_se", lambda: InvertedResidual(8), img(8, 6)),
    Case("convnext_block", lambda: ConvNeXtBlock(8), img(8, 7)),
    Case("vit_block_mha", ViTBlockMHA, seq(5, 32)),
    Case("vit_block_hand_attention", ViTBlockHand, seq(5, 32)),
    Case("transformer_encoder_layer_eval", lambda: nn.TransformerEncoderLayer(32, 4, 64, batch_first=True), seq(5, 32),
         fuses="the eval path is one aten::_transformer_encoder_layer_fwd; the other path's chains all pass "
               "nn.Dropout, whose self.training is a run-time bool"),
    Case("transformer_encoder_layer_train",
         lambda: nn.TransformerEncoderLayer(32, 4, 64, batch_first=True, norm_first=True), seq(5, 32),
         train=True, grad=True),
    Case("gpt2_block_causal", GPT2Block, seq(6, 32)),
    Case("llama_rmsnorm_swiglu", LlamaLayer, seq(5, 32)),
    Case("lstm_cell_loop", LSTMCellLoop, lambda b: (torch.randn(4, b, 8),)),
    Case("nn_lstm", lambda: RNNHead("lstm"), seq(4, 8)),
    Case("nn_gru", lambda: RNNHead("gru"), seq(4, 8)),
    Case("bn_dropout_train", BNDropTrain, lambda b: (torch.randn(b + 1, 16),), train=True, grad=True),
    Case("inplace_ops", InPlace, lambda b: (torch.randn(b, 8),),
         fuses="in-place ops on aten::linear's output stay in place: functionalize trusts only op-table "
               "producers as fresh tensors"),
    Case("optional_args", OptionalArgs, lambda b: (torch.randn(b, 8), torch.rand(b, 8) if b % 2 else None,
                                                   None if b == 3 else 0.5)),
    Case("tuple_dict_out", TupleDictOut, lambda b: (torch.randn(b, 8),)),
    Case("list_in", ListIn, lambda b: ([torch.randn(b, 8) for _ in range(3)],)),
]
