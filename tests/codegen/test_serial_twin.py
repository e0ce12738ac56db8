"""CPU kernels below the OpenMP threshold run a serial twin of the function (no OpenMP runtime,
``__restrict__`` intact); above it the parallel loop, with the same results."""
import pytest
import torch

from graphfuser.codegen.cstyle import serial_twin
from tests.helpers import check

POINTWISE = """extern "C" void k(const float* __restrict__ t0, float* __restrict__ t1, long long n0, long long n1) {
  #pragma omp parallel for schedule(static) if (n0 * n1 > 65536)
  for (long long i0 = 0; i0 < n0; ++i0) {
    #pragma omp simd
    for (long long i1 = 0; i1 < n1; ++i1) {
      t1[i0 * n1 + i1] = t0[i0 * n1 + i1] + 1.0f;
    }
  }
}"""

ROWS = """extern "C" void r(const float* __restrict__ t0, float* __restrict__ t1, long long n0) {
  float acc0 = 0.0f;
  #pragma omp parallel for simd schedule(static) if (n0 > 65536) reduction(+:acc0)
  for (long long i0 = 0; i0 < n0; ++i0) {
    acc0 += t0[i0];
  }
  t1[0] = acc0;
}"""


def test_pointwise_twin_text():
    src = serial_twin(POINTWISE)
    serial, exported = src.split("\n\n")
    assert serial.startswith("static void k_serial(const float* __restrict__ t0, float* __restrict__ t1, "
                             "long long n0, long long n1) {")
    assert "omp parallel" not in serial and "#pragma omp simd" in serial
    assert exported.splitlines()[1] == "  if (!(n0 * n1 > 65536)) { k_serial(t0, t1, n0, n1); return; }"
    assert exported.replace(exported.splitlines()[1] + "\n", "") == POINTWISE


def test_parallel_simd_keeps_its_reduction_clause():
    serial = serial_twin(ROWS).split("\n\n")[0]
    assert "  #pragma omp simd reduction(+:acc0)" in serial.splitlines()


def test_function_without_parallel_loop_is_unchanged():
    plain = POINTWISE.replace("  #pragma omp parallel for schedule(static) if (n0 * n1 > 65536)\n", "")
    assert serial_twin(plain) == plain


def _bn_hardswish(x, m, v, w, b):
    return torch.nn.functional.hardswish(torch.nn.functional.batch_norm(x, m, v, w, b, False, 0.1, 1e-3))


def _softmax_scale(x):
    return torch.softmax(x * 0.5, -1)


def _sum_rows(x):
    return (x * x).sum(0)


@pytest.mark.parametrize("size", [(1, 3, 4, 4), (1, 16, 32, 32), (2, 16, 64, 64)])   # below / above the threshold
def test_serial_and_parallel_paths_agree_with_eager(size):
    c = size[1]
    x = torch.randn(size)
    stats = [torch.randn(c), torch.rand(c) + 0.5, torch.randn(c), torch.randn(c)]
    sf = check(_bn_hardswish, x, *stats)
    src = "".join(getattr(r.compiled, "source", "") for r in sf._runners.values() if hasattr(r, "compiled"))
    assert "_serial(" in src
    check(_softmax_scale, torch.randn(size[0] * size[1] * size[2], size[3]))
    # fp32 sums of up to 8192 rows in another order than eager's: a few ulps apart
    check(_sum_rows, torch.randn(size[0] * size[1] * size[2], size[3]), rtol=1e-5, atol=1e-5)
