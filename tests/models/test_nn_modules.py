"""Every torch.nn module that torch.jit.script accepts runs through graphfuser.script (host
program, no torch.jit.script fallback) and matches eager over calls with changing batch sizes.
(nn.MultiheadAttention and nn.TransformerEncoderLayer are in the corpus; nn.Transformer is their
composition with the decoder layer below.)"""
import warnings

import pytest
import torch
import torch.nn as nn

import graphfuser
from helpers import philox_dropouts


def _x(*shape):
    return lambda b: (torch.randn(b, *shape),)


MODULES = [
    ("TransformerDecoderLayer", lambda: nn.TransformerDecoderLayer(16, 2, 32, batch_first=True),
     lambda b: (torch.randn(b, 5, 16), torch.randn(b, 4, 16))),
    ("LSTM", lambda: nn.LSTM(8, 16, 2, batch_first=True), _x(5, 8)),
    ("GRU", lambda: nn.GRU(8, 16), lambda b: (torch.randn(5, b, 8),)),
    ("RNN", lambda: nn.RNN(8, 16), lambda b: (torch.randn(5, b, 8),)),
    ("LSTMCell", lambda: nn.LSTMCell(8, 16), _x(8)),
    ("GRUCell", lambda: nn.GRUCell(8, 16), _x(8)),
    ("RNNCell", lambda: nn.RNNCell(8, 16), _x(8)),
    ("BatchNorm1d", lambda: nn.BatchNorm1d(4), _x(4, 6)),
    ("BatchNorm2d_train", lambda: nn.BatchNorm2d(4).train(), _x(4, 3, 3)),
    ("InstanceNorm1d", lambda: nn.InstanceNorm1d(4), _x(4, 6)),
    ("LayerNorm", lambda: nn.LayerNorm(6), _x(4, 6)),
    ("GroupNorm", lambda: nn.GroupNorm(2, 4), _x(4, 6)),
    ("RMSNorm", lambda: nn.RMSNorm(6), _x(4, 6)),
    ("LocalResponseNorm", lambda: nn.LocalResponseNorm(2), _x(4, 6)),
    *[(n, getattr(nn, n), _x(4, 6)) for n in [
        "ReLU", "ReLU6", "GELU", "SiLU", "Mish", "Hardswish", "Hardsigmoid", "ELU", "SELU", "CELU",
        "LeakyReLU", "PReLU", "Softplus", "Softsign", "Tanh", "Sigmoid", "Hardtanh", "Tanhshrink",
        "Hardshrink", "Softshrink", "GLU", "LogSigmoid", "Identity", "Flatten", "Dropout", "AlphaDropout"]],
    ("Softmax", lambda: nn.Softmax(-1), _x(4, 6)),
    ("LogSoftmax", lambda: nn.LogSoftmax(-1), _x(4, 6)),
    ("Softmin", lambda: nn.Softmin(-1), _x(4, 6)),
    ("Threshold", lambda: nn.Threshold(0.1, 2.0), _x(4, 6)),
    ("Dropout_train", lambda: nn.Dropout(0.3).train(), _x(4, 6)),
    ("Unflatten", lambda: nn.Unflatten(1, (2, 2)), _x(4, 6)),
    *[(n, getattr(nn, n), lambda b: (torch.randn(b, 4), torch.rand(b, 4))) for n in [
        "MSELoss", "L1Loss", "SmoothL1Loss", "HuberLoss", "BCEWithLogitsLoss", "SoftMarginLoss", "KLDivLoss"]],
    ("BCELoss", nn.BCELoss, lambda b: (torch.rand(b, 4), torch.rand(b, 4))),
    ("CrossEntropyLoss", nn.CrossEntropyLoss, lambda b: (torch.randn(b, 4), torch.randint(0, 4, (b,)))),
    ("NLLLoss", nn.NLLLoss, lambda b: (torch.randn(b, 4).log_softmax(-1), torch.randint(0, 4, (b,)))),
    ("MaxPool2d", lambda: nn.MaxPool2d(2), _x(4, 8, 8)),
    ("AvgPool2d", lambda: nn.AvgPool2d(2), _x(4, 8, 8)),
    ("AdaptiveAvgPool2d", lambda: nn.AdaptiveAvgPool2d(1), _x(4, 8, 8)),
    ("AdaptiveMaxPool2d", lambda: nn.AdaptiveMaxPool2d(2), _x(4, 8, 8)),
    ("LPPool2d", lambda: nn.LPPool2d(2, 2), _x(4, 8, 8)),
    ("Conv1d", lambda: nn.Conv1d(4, 4, 3), _x(4, 8)),
    ("Conv2d", lambda: nn.Conv2d(4, 4, 3), _x(4, 8, 8)),
    ("Conv3d", lambda: nn.Conv3d(4, 4, 3), _x(4, 5, 5, 5)),
    ("ConvTranspose2d", lambda: nn.ConvTranspose2d(4, 4, 3), _x(4, 8, 8)),
    ("Upsample", lambda: nn.Upsample(scale_factor=2, mode="bilinear"), _x(4, 8, 8)),
    ("PixelShuffle", lambda: nn.PixelShuffle(2), _x(4, 8, 8)),
    ("PixelUnshuffle", lambda: nn.PixelUnshuffle(2), _x(4, 8, 8)),
    ("ZeroPad2d", lambda: nn.ZeroPad2d(1), _x(4, 8, 8)),
    ("ReflectionPad2d", lambda: nn.ReflectionPad2d(1), _x(4, 8, 8)),
    ("ReplicationPad2d", lambda: nn.ReplicationPad2d(1), _x(4, 8, 8)),
    ("ChannelShuffle", lambda: nn.ChannelShuffle(2), _x(4, 3, 3)),
    ("Embedding", lambda: nn.Embedding(10, 4), lambda b: (torch.randint(0, 10, (b, 3)),)),
    ("EmbeddingBag", lambda: nn.EmbeddingBag(10, 4), lambda b: (torch.randint(0, 10, (b, 3)),)),
    ("Linear", lambda: nn.Linear(6, 3), _x(6)),
    ("Bilinear", lambda: nn.Bilinear(6, 6, 3), lambda b: (torch.randn(b, 6), torch.randn(b, 6))),
    ("CosineSimilarity", nn.CosineSimilarity, lambda b: (torch.randn(b, 6), torch.randn(b, 6))),
    ("PairwiseDistance", nn.PairwiseDistance, lambda b: (torch.randn(b, 6), torch.randn(b, 6))),
]


@pytest.mark.parametrize("make,inputs", [m[1:] for m in MODULES], ids=[m[0] for m in MODULES])
def test_nn_module_runs_in_the_host_program(make, inputs):
    torch.manual_seed(0)
    m = make()
    if not any(k in type(m).__name__ for k in ("Dropout", "BatchNorm")):
        m.eval()
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)   # no torch.jit.script fallback
        warnings.filterwarnings("ignore", message=".*enable_nested_tensor.*")
        sm = graphfuser.script(m)
    ref_m = __import__("copy").deepcopy(m)
    philox_dropouts(ref_m)          # a training nn.Dropout draws from graphfuser's Philox (fused)
    with torch.no_grad():
        for i, b in enumerate((2, 3, 5)):
            torch.manual_seed(10 + i)
            args = inputs(b)
            torch.manual_seed(i)
            ref = ref_m(*args)
            torch.manual_seed(i)
            torch.testing.assert_close(sm(*args), ref)
