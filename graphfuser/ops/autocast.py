"""Autocast's cast policies, per device type, as data (PyTorch's ``autocast_mode``).

Under ``torch.autocast(device_type, dtype)`` eager PyTorch casts the inputs of a listed op before
running it (non-floating and float64 tensors are never cast, nor tensors on another device type):

- ``lower``: floating inputs to the autocast dtype (matmuls and convolutions).
- ``fp32``: fp16 / bf16 inputs to float32 (ops that lose too much in low precision). On CUDA
  this includes the ``fp32_set_opt_dtype`` ops (``sum``, ``prod``, ``softmax``, ``log_softmax``,
  ``cumsum`` ...), which eager runs with ``dtype=torch.float`` when none is given: the same as
  casting their input to float32 first (the upcast is exact), and where a dtype is given the
  op converts its input to it anyway, so casting first changes nothing.
- ``promote`` ops (``addcmul``, ``addcdiv``, ``atan2`` ...) cast to the widest floating input
  type, which graphfuser's type promotion already gives: nothing to insert.

``passes/autocast.py`` makes these casts explicit graph nodes (``aten::_autocast_to_full_precision``
/ ``aten::_autocast_to_reduced_precision``, which cast only tensors on an enabled device, as
autocast does), so a fusion group computes what eager computes under the same autocast state.
The lists follow ``aten/src/ATen/autocast_mode.{h,cpp}``; ``tests/passes/test_autocast.py``
checks every op-table row's output dtype against eager's under CPU autocast.
"""
from __future__ import annotations

from typing import Optional

import torch

# Ops whose floating inputs autocast casts to its lower-precision dtype.
LOWER: dict[str, frozenset[str]] = {
    "cuda": frozenset("""
        _convolution conv1d conv2d conv3d conv_tbc conv_transpose1d conv_transpose2d conv_transpose3d
        convolution prelu addmm addmv addr matmul einsum mm mv linalg_vecdot linear addbmm baddbmm bmm
        chain_matmul linalg_multi_dot _thnn_fused_lstm_cell _thnn_fused_gru_cell lstm_cell gru_cell
        rnn_tanh_cell rnn_relu_cell _scaled_dot_product_flash_attention scaled_dot_product_attention
        """.split()),
    "cpu": frozenset("""
        conv1d conv2d conv3d bmm mm linalg_vecdot baddbmm addmm _addmm_activation addbmm linear
        _convolution matmul conv_tbc mkldnn_rnn_layer conv_transpose1d conv_transpose2d conv_transpose3d
        prelu scaled_dot_product_attention _native_multi_head_attention
        """.split()),
}

# Ops whose fp16 / bf16 inputs autocast casts to float32 (fp32 and fp32_set_opt_dtype policies).
FP32: dict[str, frozenset[str]] = {
    "cuda": frozenset("""
        acos asin cosh erfinv exp expm1 log log10 log2 log1p reciprocal rsqrt sinh tan pow softplus
        layer_norm native_layer_norm group_norm frobenius_norm nuclear_norm cosine_similarity
        poisson_nll_loss cosine_embedding_loss nll_loss nll_loss2d hinge_embedding_loss kl_div l1_loss
        smooth_l1_loss huber_loss mse_loss margin_ranking_loss multilabel_margin_loss soft_margin_loss
        triplet_margin_loss multi_margin_loss binary_cross_entropy_with_logits dist pdist cdist renorm
        logsumexp upsample_nearest1d _upsample_nearest_exact1d upsample_nearest2d
        _upsample_nearest_exact2d upsample_nearest3d _upsample_nearest_exact3d upsample_linear1d
        upsample_bilinear2d _upsample_bilinear2d_aa upsample_trilinear3d upsample_bicubic2d
        _upsample_bicubic2d_aa
        prod softmax log_softmax cumprod cumsum linalg_vector_norm linalg_matrix_norm sum norm
        """.split()),
    "cpu": frozenset("""
        avg_pool3d binary_cross_entropy grid_sampler polar prod quantile nanquantile stft cdist
        grid_sampler_2d grid_sampler_3d trace view_as_complex cholesky cholesky_inverse cholesky_solve
        inverse lu_solve orgqr ormqr pinverse max_pool3d max_unpool2d max_unpool3d adaptive_avg_pool3d
        reflection_pad1d reflection_pad2d replication_pad1d replication_pad2d replication_pad3d mse_loss
        cosine_embedding_loss nll_loss nll_loss2d hinge_embedding_loss poisson_nll_loss smooth_l1_loss
        cross_entropy_loss l1_loss huber_loss margin_ranking_loss soft_margin_loss triplet_margin_loss
        multi_margin_loss ctc_loss kl_div multilabel_margin_loss binary_cross_entropy_with_logits
        fractional_max_pool2d fractional_max_pool3d adaptive_max_pool3d
        """.split()),
}

# (device type, autocast dtype) per enabled device type, in a fixed order; None when autocast is off.
AutocastState = Optional[tuple[tuple[str, torch.dtype], ...]]
DEVICE_TYPES = ("cpu", "cuda")


def autocast_state() -> AutocastState:
    """The current thread's autocast state as a hashable key (None when autocast is off)."""
    if not torch._C._is_any_autocast_enabled():
        return None
    state = tuple((dev, torch.get_autocast_dtype(dev)) for dev in DEVICE_TYPES if torch.is_autocast_enabled(dev))
    return state or None


def policy(kind: str, device_type: str) -> Optional[str]:
    """``"lower"``, ``"fp32"`` or None: what autocast on ``device_type`` does to ``kind``'s inputs."""
    if not kind.startswith("aten::"):
        return None
    name = kind[6:]
    if name in FP32.get(device_type, ()):
        return "fp32"
    if name in LOWER.get(device_type, ()):
        return "lower"
    return None


def describe(state: AutocastState) -> str:
    """``autocast(cuda=bfloat16)`` / ``no autocast``: how logs and graph dumps name a state."""
    if not state:
        return "no autocast"
    return "autocast(" + ", ".join(f"{dev}={str(dt).replace('torch.', '')}" for dev, dt in state) + ")"
