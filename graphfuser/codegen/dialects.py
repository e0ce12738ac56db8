"""The two dialects of the C-style renderer, as data: C++ (CPU) and CUDA.

They differ in the kernel prefix, how a parallel axis is spelled, the type map for fp16/bf16
storage, qualifiers, a few intrinsic overrides and the prelude; the walk in ``cstyle.py`` is
shared. The prelude defines every ``gf_*`` function the primitive templates use, for float and
double (and integers where it makes sense), so templates stay dialect-neutral.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import torch

from ..config import config
from .reduction.cuda_prelude import CUDA_REDUCTION
from .schedule import ParallelType as P

STORAGE_TYPES = {
    torch.float32: "float", torch.float64: "double", torch.float16: "unsigned short",
    torch.bfloat16: "unsigned short", torch.int64: "long long", torch.int32: "int", torch.int16: "short",
    torch.int8: "signed char", torch.uint8: "unsigned char", torch.bool: "bool",
}
COMPUTE_TYPES = {**STORAGE_TYPES, torch.float16: "float", torch.bfloat16: "float"}
LOAD_CONVERT = {torch.float16: "gf_h2f({0})", torch.bfloat16: "gf_b2f({0})"}
STORE_CONVERT = {torch.float16: "gf_f2h({0})", torch.bfloat16: "gf_f2b({0})"}

# name -> (float spelling, double spelling); shared by both dialects unless overridden.
_MATH = {
    "exp": ("expf(x)", "exp(x)"), "exp2": ("exp2f(x)", "exp2(x)"), "expm1": ("expm1f(x)", "expm1(x)"),
    "log": ("logf(x)", "log(x)"), "log2": ("log2f(x)", "log2(x)"), "log10": ("log10f(x)", "log10(x)"),
    "log1p": ("log1pf(x)", "log1p(x)"), "sqrt": ("sqrtf(x)", "sqrt(x)"), "sin": ("sinf(x)", "sin(x)"),
    "cos": ("cosf(x)", "cos(x)"), "tan": ("tanf(x)", "tan(x)"), "asin": ("asinf(x)", "asin(x)"),
    "acos": ("acosf(x)", "acos(x)"), "atan": ("atanf(x)", "atan(x)"), "sinh": ("sinhf(x)", "sinh(x)"),
    "cosh": ("coshf(x)", "cosh(x)"), "tanh": ("tanhf(x)", "tanh(x)"), "erf": ("erff(x)", "erf(x)"),
    "erfc": ("erfcf(x)", "erfc(x)"), "lgamma": ("lgammaf(x)", "lgamma(x)"), "floor": ("floorf(x)", "floor(x)"),
    "ceil": ("ceilf(x)", "ceil(x)"), "trunc": ("truncf(x)", "trunc(x)"), "round": ("rintf(x)", "rint(x)"),
    "abs": ("fabsf(x)", "fabs(x)"), "rsqrt": ("1.0f / sqrtf(x)", "1.0 / sqrt(x)"),
    "reciprocal": ("1.0f / x", "1.0 / x"), "sigmoid": ("1.0f / (1.0f + expf(-x))", "1.0 / (1.0 + exp(-x))"),
}
_MATH2 = {
    "pow": ("powf(x, y)", "pow(x, y)"), "fmod": ("fmodf(x, y)", "fmod(x, y)"),
    "atan2": ("atan2f(x, y)", "atan2(x, y)"),
}

_COMMON = r"""
GF_FN float gf_round_half(float x) { return gf_h2f(gf_f2h(x)); }
GF_FN float gf_round_bf16(float x) { return gf_b2f(gf_f2b(x)); }
template <typename T> GF_FN T gf_abs(T x) { return x < 0 ? -x : x; }
GF_FN bool gf_abs(bool x) { return x; }
// Ties keep the first operand, as eager's CPU clamp / clamp_min / relu (std::max(x, bound)) and
// its scalar loops do: maximum(0.0, -0.0) is 0.0, clamp(0.0, min=-0.0) is 0.0, not the bound's -0.0.
template <typename T> GF_FN T gf_maximum(T a, T b) { return a < b ? b : a; }
template <typename T> GF_FN T gf_minimum(T a, T b) { return b < a ? b : a; }
#if defined(__CUDA_ARCH__)
// eager's CUDA kernels (clamp, clamp_min / max, relu, maximum / minimum) call ::max / ::min, the
// hardware's, for which -0.0 < 0.0: max(-0.0, 0.0) is 0.0 and min(0.0, -0.0) is -0.0 in either
// order (a CUDA clamp_(min=0.0) of -0.0 gave -0.0 and its reciprocal -inf where eager gives inf:
// fuzz graph 1805 of CUDA seed 34001)
#if __CUDA_ARCH__ >= 800
// one instruction that propagates NaN (the select below is a branch per call in the PTX)
GF_FN float gf_maximum(float a, float b) { float r; asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b)); return r; }
GF_FN float gf_minimum(float a, float b) { float r; asm("min.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b)); return r; }
#else
GF_FN float gf_maximum(float a, float b) { return (a != a || b != b) ? a + b : fmaxf(a, b); }
GF_FN float gf_minimum(float a, float b) { return (a != a || b != b) ? a + b : fminf(a, b); }
#endif
GF_FN double gf_maximum(double a, double b) { return (a != a || b != b) ? a + b : fmax(a, b); }
GF_FN double gf_minimum(double a, double b) { return (a != a || b != b) ? a + b : fmin(a, b); }
#else
GF_FN float gf_maximum(float a, float b) { return (a != a || b != b) ? a + b : (a < b ? b : a); }
GF_FN double gf_maximum(double a, double b) { return (a != a || b != b) ? a + b : (a < b ? b : a); }
GF_FN float gf_minimum(float a, float b) { return (a != a || b != b) ? a + b : (b < a ? b : a); }
GF_FN double gf_minimum(double a, double b) { return (a != a || b != b) ? a + b : (b < a ? b : a); }
#endif
template <typename T> GF_FN T gf_fmax(T a, T b) { return a != a ? b : (b != b ? a : (a < b ? b : a)); }
template <typename T> GF_FN T gf_fmin(T a, T b) { return a != a ? b : (b != b ? a : (b < a ? b : a)); }
template <typename T> GF_FN bool gf_isnan(T x) { return x != x; }
template <typename T> GF_FN bool gf_isinf(T x) { return x == x && (x - x) != (x - x); }
template <typename T> GF_FN bool gf_isfinite(T x) { return (x - x) == (x - x); }
GF_FN bool gf_signbit(float x) { return signbit(x); }
GF_FN bool gf_signbit(double x) { return signbit(x); }
GF_FN int gf_wrap_add(int a, int b) { return (int)((unsigned)a + (unsigned)b); }
GF_FN int gf_wrap_sub(int a, int b) { return (int)((unsigned)a - (unsigned)b); }
GF_FN int gf_wrap_mul(int a, int b) { return (int)((unsigned)a * (unsigned)b); }
GF_FN int gf_wrap_neg(int a) { return (int)(0u - (unsigned)a); }
GF_FN long long gf_wrap_add(long long a, long long b) { return (long long)((unsigned long long)a + (unsigned long long)b); }
GF_FN long long gf_wrap_sub(long long a, long long b) { return (long long)((unsigned long long)a - (unsigned long long)b); }
GF_FN long long gf_wrap_mul(long long a, long long b) { return (long long)((unsigned long long)a * (unsigned long long)b); }
GF_FN long long gf_wrap_neg(long long a) { return (long long)(0ull - (unsigned long long)a); }
GF_FN float gf_fma(float a, float b, float c) { return fmaf(a, b, c); }
GF_FN double gf_fma(double a, double b, double c) { return fma(a, b, c); }
// Philox4x32-10 (Salmon et al., SC'11): a counter-based generator. The random number of an
// element is a pure function of (seed, offset, linear element index); ops/philox.py computes the
// same numbers with torch ops for the fallback.
GF_FN void gf_philox(unsigned long long seed, unsigned long long index, unsigned long long offset,
                     unsigned int out[4]) {
  unsigned int c0 = (unsigned int)index, c1 = (unsigned int)(index >> 32);
  unsigned int c2 = (unsigned int)offset, c3 = (unsigned int)(offset >> 32);
  unsigned int k0 = (unsigned int)seed, k1 = (unsigned int)(seed >> 32);
  GF_UNROLL_ALL
  for (int r = 0; r < 10; ++r) {
    const unsigned long long p0 = (unsigned long long)0xD2511F53u * c0;
    const unsigned long long p1 = (unsigned long long)0xCD9E8D57u * c2;
    const unsigned int n0 = (unsigned int)(p1 >> 32) ^ c1 ^ k0;
    const unsigned int n2 = (unsigned int)(p0 >> 32) ^ c3 ^ k1;
    c1 = (unsigned int)p1; c3 = (unsigned int)p0; c0 = n0; c2 = n2;
    k0 += 0x9E3779B9u; k1 += 0xBB67AE85u;
  }
  out[0] = c0; out[1] = c1; out[2] = c2; out[3] = c3;
}
// A kernel recorded into a CUDA graph of a training call draws from a base read when the graph
// runs (ops/philox.py, philox_capture): a negative offset says that the seed is the address of
// {seed, base} in device memory and the offset counts from that base (bit 63 cleared).
GF_FN void gf_rng_base(long long& seed, long long& offset) {
#if defined(__CUDA_ARCH__)
  if (offset < 0) {
    const long long* p = (const long long*)seed;
    seed = p[0];
    offset = (offset & 0x7FFFFFFFFFFFFFFFLL) + p[1];
  }
#endif
}
// uniform in [0, 1): 24 random bits (float) or 53 (double)
// fp32: word index % 4 of block index / 4 (one evaluation per four elements where the
// renderer says which lanes share a block: gf_lane4 below)
GF_FN float gf_philox_uniform_f32(long long seed, long long offset, long long index) {
  gf_rng_base(seed, offset);
  unsigned int r[4];
  gf_philox((unsigned long long)seed, (unsigned long long)index >> 2, (unsigned long long)offset, r);
  const unsigned int w = (index & 2) ? ((index & 1) ? r[3] : r[2]) : ((index & 1) ? r[1] : r[0]);
  return (float)(w >> 8) * 5.9604644775390625e-08f;
}
// Lane v of a vector whose lane 0 has linear index 4 q (vector loops of 4 or 8 lanes whose
// lane 0 index is a multiple of 4): after unrolling, lanes 0-3 (4-7) ask for the same block
// q (q + 1) in so many words, and the compiler evaluates it once.
struct gf_lane4 { long long q; int v; };
GF_FN float gf_philox_uniform_f32(long long seed, long long offset, gf_lane4 l) {
  gf_rng_base(seed, offset);
  unsigned int r[4];
  gf_philox((unsigned long long)seed, (unsigned long long)(l.q + (l.v >> 2)), (unsigned long long)offset, r);
  const unsigned int w = (l.v & 2) ? ((l.v & 1) ? r[3] : r[2]) : ((l.v & 1) ? r[1] : r[0]);
  return (float)(w >> 8) * 5.9604644775390625e-08f;
}
GF_FN double gf_philox_uniform_f64(long long seed, long long offset, long long index) {
  gf_rng_base(seed, offset);
  unsigned int r[4];
  gf_philox((unsigned long long)seed, (unsigned long long)index, (unsigned long long)offset, r);
  return (double)((((unsigned long long)r[0] << 32) | r[1]) >> 11) * 1.1102230246251565e-16;
}
GF_FN double gf_philox_uniform_f64(long long seed, long long offset, gf_lane4 l) {
  return gf_philox_uniform_f64(seed, offset, l.q * 4 + l.v);
}
template <typename T> GF_FN T gf_remainder(T a, T b) {
  T r = gf_fmod(a, b);
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
"""

_CPU_HALF = r"""
static inline float gf_bits_to_float(unsigned int u) { float f; memcpy(&f, &u, 4); return f; }
static inline unsigned int gf_float_to_bits(float f) { unsigned int u; memcpy(&u, &f, 4); return u; }
static inline float gf_b2f(unsigned short h) { return gf_bits_to_float(((unsigned int)h) << 16); }
/* Branch-free conversions so that simd loops vectorize them; round to nearest even. */
static inline unsigned short gf_f2b(float f) {
  unsigned int u = gf_float_to_bits(f);
  unsigned int r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  r = (u & 0x7fffffffu) > 0x7f800000u ? ((u >> 16) | 0x40u) : r;
  return (unsigned short)r;
}
static inline float gf_h2f(unsigned short h) {
  unsigned int sign = ((unsigned int)h & 0x8000u) << 16;
  unsigned int em = (unsigned int)h & 0x7fffu;
  unsigned int e = em >> 10;
  unsigned int normal = (em << 13) + 0x38000000u;
  unsigned int special = (em << 13) | 0x7f800000u;
  unsigned int sub = gf_float_to_bits((float)(int)em * 5.9604644775390625e-08f);
  unsigned int is_sub = 0u - (unsigned int)(e == 0), is_special = 0u - (unsigned int)(e == 31);
  unsigned int r = (sub & is_sub) | (special & is_special) | (normal & ~(is_sub | is_special));
  return gf_bits_to_float(r | sign);
}
static inline unsigned short gf_f2h(float f) {
  unsigned int u = gf_float_to_bits(f);
  unsigned int sign = (u >> 16) & 0x8000u;
  unsigned int a = u & 0x7fffffffu;
  unsigned int normal = (a + 0xc8000fffu + ((a >> 13) & 1u)) >> 13;
  float m = (gf_bits_to_float(a) * 16777216.0f + 12582912.0f) - 12582912.0f;
  unsigned int r = a < 0x38800000u ? (unsigned int)(int)m : normal;
  r = a >= 0x477ff000u ? 0x7c00u : r;
  r = a > 0x7f800000u ? 0x7e00u : r;
  return (unsigned short)(sign | r);
}
"""

from .cpu_math import _CPU_OPAQUE, _CPU_VECTOR_MATH  # noqa: E402


# lgamma on the CPU: eager's float kernel is SLEEF's vectorized lgammaf (within 1 ulp, correctly
# rounded in ~98% of floats); glibc's lgammaf (2.36) is correctly rounded in ~65% and a few ulps
# off elsewhere, which an ill-conditioned consumer turns into a visible error (tan(lgamma(x) * 16)
# near a pole of tan: fuzz graph 3883 of seed 8787). libm's double lgamma rounded to float is
# correctly rounded, so it agrees with eager wherever eager is. The reentrant ``_r`` forms leave
# the global ``signgam`` alone (OpenMP threads would race on it).
_CPU_LGAMMA = r"""
static inline float gf_lgammaf_cpu(float x) { int s; return (float)lgamma_r((double)x, &s); }
static inline double gf_lgamma_cpu(double x) { int s; return lgamma_r(x, &s); }
"""

# Row scratch (reduction kernels that keep a row's computed values for a later pass: softmax's
# exp(x - max)): a buffer per OpenMP thread and cached value, grown to the longest row it has
# held and freed when the thread ends, so rows of any length keep them (a stack array capped
# them at 16384 elements: a float32 softmax over 65536 columns computed exp twice per element).
_CPU_ROW_SCRATCH = r"""
template <typename T, int S> struct gf_row_buffer { T* p = 0; long long n = 0; ~gf_row_buffer() { free(p); } };
template <typename T, int S> static inline T* gf_row_scratch(long long n) {
  static thread_local gf_row_buffer<T, S> b;
  if (b.n < n) { free(b.p); b.p = (T*)malloc(sizeof(T) * (size_t)n); b.n = b.p ? n : 0; }
  return b.p;
}
"""

_CUDA_HALF = r"""
GF_FN float gf_h2f(unsigned short h) { float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h)); return f; }
GF_FN unsigned short gf_f2h(float f) { unsigned short h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h; }
GF_FN float gf_b2f(unsigned short h) { return __int_as_float(((int)h) << 16); }
GF_FN float gf_ex2(float x) { float r; asm("ex2.approx.f32 %0, %1;" : "=f"(r) : "f"(x)); return r; }
GF_FN float gf_rcp(float x) { float r; asm("rcp.approx.f32 %0, %1;" : "=f"(r) : "f"(x)); return r; }
/* n / d for 0 <= n < 2^31 with m, s precomputed on the host: s = ceil(log2 d),
   m = 2^32 (2^s - d) / d + 1 (round-up method). */
GF_FN int gf_udiv(int n, unsigned int m, unsigned int s) { return (int)((__umulhi((unsigned int)n, m) + (unsigned int)n) >> s); }
GF_FN unsigned short gf_f2b(float f) { unsigned short h; asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h; }
template <typename T, int N> struct alignas(sizeof(T) * N) gf_vec { T v[N]; };
template <int N, typename T> GF_FN void gf_load(T* dst, const T* src) {
  gf_vec<T, N> r = *reinterpret_cast<const gf_vec<T, N>*>(src);
  #pragma unroll
  for (int i = 0; i < N; ++i) dst[i] = r.v[i];
}
/* gf_load under a predicate: the load is one predicated PTX instruction (zeros where ``ok`` is
   false, and no access), so a loop body guarded by it stays one basic block and the compiler can
   issue the loads of several unrolled iterations before the arithmetic of the first */
template <int B> struct gf_pld;
template <> struct gf_pld<1> { GF_FN static void f(void* d, const void* s, bool ok) {
  unsigned short a = 0;
  asm("{ .reg .pred p; setp.ne.b32 p, %2, 0; @p ld.global.nc.u8 %0, [%1]; }" : "+h"(a) : "l"(s), "r"((int)ok));
  *reinterpret_cast<unsigned char*>(d) = (unsigned char)a; } };
template <> struct gf_pld<2> { GF_FN static void f(void* d, const void* s, bool ok) {
  unsigned short a = 0;
  asm("{ .reg .pred p; setp.ne.b32 p, %2, 0; @p ld.global.nc.u16 %0, [%1]; }" : "+h"(a) : "l"(s), "r"((int)ok));
  *reinterpret_cast<unsigned short*>(d) = a; } };
template <> struct gf_pld<4> { GF_FN static void f(void* d, const void* s, bool ok) {
  unsigned int a = 0;
  asm("{ .reg .pred p; setp.ne.b32 p, %2, 0; @p ld.global.nc.u32 %0, [%1]; }" : "+r"(a) : "l"(s), "r"((int)ok));
  *reinterpret_cast<unsigned int*>(d) = a; } };
template <> struct gf_pld<8> { GF_FN static void f(void* d, const void* s, bool ok) {
  unsigned int a = 0, b = 0;
  asm("{ .reg .pred p; setp.ne.b32 p, %3, 0; @p ld.global.nc.v2.u32 {%0, %1}, [%2]; }"
      : "+r"(a), "+r"(b) : "l"(s), "r"((int)ok));
  *reinterpret_cast<uint2*>(d) = make_uint2(a, b); } };
template <> struct gf_pld<16> { GF_FN static void f(void* d, const void* s, bool ok) {
  unsigned int a = 0, b = 0, c = 0, e = 0;
  asm("{ .reg .pred p; setp.ne.b32 p, %5, 0; @p ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4]; }"
      : "+r"(a), "+r"(b), "+r"(c), "+r"(e) : "l"(s), "r"((int)ok));
  *reinterpret_cast<uint4*>(d) = make_uint4(a, b, c, e); } };
template <int N, typename T> GF_FN void gf_load_if(T* dst, const T* src, bool ok) {
  gf_vec<T, N> r;
  gf_pld<sizeof(T) * N>::f(&r, src, ok);
  #pragma unroll
  for (int i = 0; i < N; ++i) dst[i] = r.v[i];
}
template <typename T> GF_FN T gf_ld_if(const T* src, bool ok) {
  T r;
  gf_pld<sizeof(T)>::f(&r, src, ok);
  return r;
}
/* ... and a store under a predicate, one predicated instruction */
template <int B> struct gf_pst;
template <> struct gf_pst<1> { GF_FN static void f(void* d, const void* s, bool ok) {
  unsigned short a = *reinterpret_cast<const unsigned char*>(s);
  asm volatile("{ .reg .pred p; setp.ne.b32 p, %2, 0; @p st.global.u8 [%0], %1; }" :: "l"(d), "h"(a), "r"((int)ok) : "memory"); } };
template <> struct gf_pst<2> { GF_FN static void f(void* d, const void* s, bool ok) {
  unsigned short a = *reinterpret_cast<const unsigned short*>(s);
  asm volatile("{ .reg .pred p; setp.ne.b32 p, %2, 0; @p st.global.u16 [%0], %1; }" :: "l"(d), "h"(a), "r"((int)ok) : "memory"); } };
template <> struct gf_pst<4> { GF_FN static void f(void* d, const void* s, bool ok) {
  unsigned int a = *reinterpret_cast<const unsigned int*>(s);
  asm volatile("{ .reg .pred p; setp.ne.b32 p, %2, 0; @p st.global.u32 [%0], %1; }" :: "l"(d), "r"(a), "r"((int)ok) : "memory"); } };
template <> struct gf_pst<8> { GF_FN static void f(void* d, const void* s, bool ok) {
  uint2 a = *reinterpret_cast<const uint2*>(s);
  asm volatile("{ .reg .pred p; setp.ne.b32 p, %3, 0; @p st.global.v2.u32 [%0], {%1, %2}; }"
               :: "l"(d), "r"(a.x), "r"(a.y), "r"((int)ok) : "memory"); } };
template <> struct gf_pst<16> { GF_FN static void f(void* d, const void* s, bool ok) {
  uint4 a = *reinterpret_cast<const uint4*>(s);
  asm volatile("{ .reg .pred p; setp.ne.b32 p, %5, 0; @p st.global.v4.u32 [%0], {%1, %2, %3, %4}; }"
               :: "l"(d), "r"(a.x), "r"(a.y), "r"(a.z), "r"(a.w), "r"((int)ok) : "memory"); } };
template <int N, typename T> GF_FN void gf_store_if(T* dst, const T* src, bool ok) {
  gf_vec<T, N> r;
  #pragma unroll
  for (int i = 0; i < N; ++i) r.v[i] = src[i];
  gf_pst<sizeof(T) * N>::f(dst, &r, ok);
}
template <int N, typename T> GF_FN void gf_store(T* dst, const T* src) {
  gf_vec<T, N> r;
  #pragma unroll
  for (int i = 0; i < N; ++i) r.v[i] = src[i];
  *reinterpret_cast<gf_vec<T, N>*>(dst) = r;
}
"""


def _math_prelude(overrides: dict[str, tuple[str, str]]) -> str:
    lines = []
    for name, (f, d) in {**_MATH, **overrides}.items():
        lines.append(f"GF_FN float gf_{name}(float x) {{ return {f}; }}")
        lines.append(f"GF_FN double gf_{name}(double x) {{ return {d}; }}")
    for name, (f, d) in _MATH2.items():
        lines.append(f"GF_FN float gf_{name}(float x, float y) {{ return {f}; }}")
        lines.append(f"GF_FN double gf_{name}(double x, double y) {{ return {d}; }}")
    lines.append("template <typename T> GF_FN T gf_pow(T x, T y) { T r = 1; while (y > 0) { if (y & 1) r *= x; x *= x; y >>= 1; } return r; }")
    for name in ("floor", "ceil", "trunc", "round"):
        lines.append(f"template <typename T> GF_FN T gf_{name}(T x) {{ return x; }}")
    return "\n".join(lines)


PRELUDE_END = "/* gf: end of the prelude */"


@dataclass
class Dialect:
    name: str
    kernel_prefix: str
    qualifier: str
    restrict: str
    headers: str
    half_prelude: str
    math_overrides: dict = field(default_factory=dict)
    # the overrides under PYTORCH_NVFUSER_DISABLE=fast_math (None: that knob changes nothing)
    precise_overrides: Optional[dict] = None
    # How a leaf axis is realized. {i}: loop variable, {ext}: extent, {T}: index type.
    loops: dict = field(default_factory=dict)
    binds: dict = field(default_factory=dict)          # axes that are a hardware index, not a loop
    parallel_pragma: str = ""                           # before the outermost parallel loop
    simd_pragma: str = ""
    parallel_simd_pragma: str = ""                      # a simd loop split across threads ({work} {threshold})
    unroll_pragma: str = "#pragma unroll"
    # Source-level switch that turns multiply-add contraction off (kernels with a max / min
    # reduction: ``cstyle_reduction.exact_products``); empty: the compile option does it (NVRTC)
    no_contract_pragma: str = ""
    vector_registers: bool = False                      # Vectorize = 16-byte register vectors
    constants: dict = field(default_factory=dict)
    # Reduction kernels. thread_reduce: how accumulators combine across the threads of a bound
    # axis ({acc}, {op}); shared_decl: the scratch those combines use; simd_reduction: the
    # OpenMP reduction identifier of each op for simd loops that accumulate.
    thread_reduce: dict = field(default_factory=dict)
    thread_reduce_pair: dict = field(default_factory=dict)     # (pair kind, axis): {a} {b} {n}
    thread_reduce2: dict = field(default_factory=dict)         # axis: two accumulators {a} {b}, one {op}
    shared_decl: str = ""
    # kernels whose combines run across threadIdx.x only (inner reductions): a warp's partials
    # per value, at most three values (gf_block_chan_x)
    shared_x_decl: str = ""
    # several values combined across one thread axis at once ({op} {ct} {k} values in {arr},
    # {r} per round, block {bx} x {by}, {cap} entries of {ct} of scratch), and the scratch
    # (doubles) kernels with such a combine declare instead of shared_decl's
    thread_reduce_k: dict = field(default_factory=dict)
    shared_k_doubles: int = 0
    simd_reduction: dict = field(default_factory=dict)
    reduction_prelude: str = ""
    row_scratch: bool = False                           # per-row arrays of run-time length
    row_scratch_decl: str = "{ct} {name}[{n}];"         # one (``slot``: the kernel's k-th array)
    # The prelude's last line: where a compiler that caches parsed headers may cut the source
    # (runtime/cpu.py's precompiled prelude); empty: nowhere
    prelude_end: str = ""
    fast_div: bool = False                              # gf_udiv (multiply-high + shift) exists
    # (first row, row step) of a grid-stride row loop: persistent reduction kernels prefetch
    # the next row's inputs into registers while they reduce this one. Empty: no prefetch.
    row_prefetch: tuple = ()
    # The same for kernels that run several rows per block, one row per blockDim.x group of
    # threads (``row_loop_multi``: the row loop; ``thread_linear`` / ``block_threads``: a
    # thread's index in its block and the block's size). Empty: one row per block.
    row_prefetch_multi: tuple = ()
    row_loop_multi: str = ""
    # The row "loop" of a kernel launched with one block per row (even rows): runs once.
    row_loop_once: str = ""
    thread_linear: str = ""
    block_threads: str = ""
    # Declaration of the dynamic shared memory the prefetch stages use (gf_cp_async /
    # gf_cp_commit / gf_cp_wait in the reduction prelude); empty: prefetch into registers.
    async_copy: str = ""
    # Reductions split across blocks, per grid axis: per thread axis that reduces, "put" writes
    # a block's partial ({acc}, {ct}; {slot}: the reduction-and-row index, or {n}: the reduction
    # and {row} of {rows}; {valid}: a real row) and "combine" reduces the row's partials ({op});
    # "last" leaves ({leave}) unless this block is the row's last ({row}); multi-pass kernels instead meet at "sync" (a barrier of the
    # blocks sharing blockIdx.x; "sync_decl" declares its state) and store row outputs from the
    # "leader" block; their even passes run the chunk loop "reverse". Kernels with such a leaf
    # take two more pointers: gf_work (8-byte slots) and gf_sem (zeroed counters: one per row,
    # or per blockIdx.x for the barrier).
    grid_reduce: dict = field(default_factory=dict)
    runtime_unroll: str = ""                            # before reduction loops of run-time extent
    masked_loads: bool = False                          # gf_load_if / gf_ld_if: predicated loads
    # a masked body's loop, U iterations a trip (render.open_masked_unroll): per loop type, the
    # (trip loop, the iteration's index, its bound) forward and backward
    masked_unroll: dict = field(default_factory=dict)
    # (op, dtype) -> accumulate statement ({a} {v}) that propagates NaN by itself: no NaN flag.
    nan_combine: dict = field(default_factory=dict)
    # Float sums over a run-time extent go through chunk accumulators of this many iterations
    # (``reduction/blocks.py``); 0: one accumulator per thread / lane for the whole loop.
    sum_block: int = 0
    exp_sum_block: int = 0          # ... for sums of exponentials (positive terms: blocks.py); 0: sum_block
    # The last iteration of a reduced loop of run-time extent, per axis: (declaration of {i}
    # for extent {ext}, condition that this thread runs it, or ""). Register vectors along a row
    # take rows of any length where the dialect has it: a row's partial last vector runs there,
    # lane by lane (``reduction/vectors.py``).
    last_iteration: dict = field(default_factory=dict)

    def prelude(self) -> str:
        overrides = self.math_overrides
        if self.precise_overrides is not None and config.is_disabled("fast_math"):
            overrides = self.precise_overrides
        return "\n".join([self.headers, f"#define GF_FN {self.qualifier}", self.constants_text(),
                          self.half_prelude, _math_prelude(overrides), _COMMON]
                         + ([self.prelude_end] if self.prelude_end else []))

    def constants_text(self) -> str:
        return "\n".join(f"#define {k} {v}" for k, v in self.constants.items())


CPP = Dialect(
    name="cpp",
    kernel_prefix='extern "C" void',
    qualifier="static inline",
    restrict="__restrict__",
    headers="#include <math.h>\n#include <string.h>\n#include <stdint.h>\n#include <stdlib.h>",
    half_prelude=_CPU_HALF + _CPU_OPAQUE + _CPU_VECTOR_MATH + _CPU_LGAMMA + _CPU_ROW_SCRATCH,
    prelude_end=PRELUDE_END,
    math_overrides={"exp": ("gf_vexpf(x)", "exp(x)"), "tanh": ("gf_vtanhf(x)", "tanh(x)"),
                    "erf": ("gf_verff(x)", "erf(x)"), "lgamma": ("gf_lgammaf_cpu(x)", "gf_lgamma_cpu(x)"),
                    "sigmoid": ("1.0f / (1.0f + gf_vexpf(-x))", "1.0 / (1.0 + exp(-x))"),
                    "atan": ("gf_atanf_opaque(x)", "gf_atan_opaque(x)")},
    loops={
        P.Serial: "for ({T} {i} = 0; {i} < {ext}; ++{i})",
        P.BIDx: "for ({T} {i} = 0; {i} < {ext}; ++{i})",
        P.BIDy: "for ({T} {i} = 0; {i} < {ext}; ++{i})",
        P.TIDx: "for ({T} {i} = 0; {i} < {ext}; ++{i})",
        P.TIDy: "for ({T} {i} = 0; {i} < {ext}; ++{i})",
        P.Unroll: "for ({T} {i} = 0; {i} < {ext}; ++{i})",
        P.Vectorize: "for ({T} {i} = 0; {i} < {ext}; ++{i})",
    },
    parallel_pragma="#pragma omp parallel for schedule(static) if ({work} > {threshold})",
    simd_pragma="#pragma omp simd",
    no_contract_pragma='#pragma GCC optimize ("fp-contract=off")',
    parallel_simd_pragma="#pragma omp parallel for simd schedule(static) if ({work} > {threshold})",
    unroll_pragma="#pragma GCC unroll {ext}",
    simd_reduction={"sum": "+", "prod": "*", "max": "max", "min": "min", "or": "|"},
    row_scratch=True,
    row_scratch_decl="{ct}* {name} = gf_row_scratch<{ct}, {slot}>({n});",
    sum_block=32,           # a scalar (gathered) loop adds 32 values per partial, a simd lane 32 / width
    exp_sum_block=256,
    constants={"GF_UNROLL_ALL": '_Pragma("GCC unroll 16")', "GF_INF_F": "__builtin_inff()", "GF_NAN_F": "__builtin_nanf(\"\")",
               "GF_INF_D": "__builtin_inf()", "GF_NAN_D": "__builtin_nan(\"\")"},
)

CUDA = Dialect(
    name="cuda",
    kernel_prefix='extern "C" __global__ void __launch_bounds__({block})',
    qualifier="__device__ __forceinline__",
    restrict="__restrict__",
    headers="",
    half_prelude=_CUDA_HALF,
    # exp(x) = 2^(x log2 e) with the hardware's ex2.approx (2 ulp; like Inductor's tl.exp): 2
    # instructions instead of expf's 8, relative error below 1e-6 for |x| < 16. sigmoid (and so
    # silu and tanh-GELU) takes the hardware reciprocal (rcp.approx, 1 ulp, subnormal results
    # kept) of 1 + that exp: IEEE division made a bf16 bias + GELU compute-bound (78% of copy
    # bandwidth on an H200 against 95%). PYTORCH_NVFUSER_DISABLE=fast_math: expf and IEEE division.
    math_overrides={"rsqrt": ("rsqrtf(x)", "rsqrt(x)"), "exp": ("gf_ex2(x * 1.4426950408889634f)", "exp(x)"),
                    "sigmoid": ("gf_rcp(1.0f + gf_ex2(x * -1.4426950408889634f))", "1.0 / (1.0 + exp(-x))")},
    precise_overrides={"rsqrt": ("rsqrtf(x)", "rsqrt(x)")},
    loops={
        P.Serial: "for ({T} {i} = 0; {i} < {ext}; ++{i})",
        P.BIDx: "for ({T} {i} = blockIdx.x; {i} < {ext}; {i} += gridDim.x)",
        P.BIDy: "for ({T} {i} = blockIdx.y; {i} < {ext}; {i} += gridDim.y)",
        P.Unroll: "for ({T} {i} = 0; {i} < {ext}; ++{i})",
        P.Vectorize: "for ({T} {i} = 0; {i} < {ext}; ++{i})",
    },
    binds={P.TIDx: "const {T} {i} = threadIdx.x;", P.TIDy: "const {T} {i} = threadIdx.y;"},
    vector_registers=True,
    fast_div=True,
    row_prefetch=("blockIdx.x", "gridDim.x"),
    # narrow rows: blockDim.y rows per block, the row index spread over blocks and threadIdx.y
    row_prefetch_multi=("(blockIdx.x * blockDim.y + threadIdx.y)", "(gridDim.x * blockDim.y)"),
    row_loop_multi="for ({T} {i} = blockIdx.x * blockDim.y + threadIdx.y; {i} < {ext}; {i} += gridDim.x * blockDim.y)",
    row_loop_once="for ({T} {i} = blockIdx.x; {i} < {ext}; {i} = {ext})",
    thread_linear="(int)(threadIdx.y * blockDim.x + threadIdx.x)",
    block_threads="(int)(blockDim.x * blockDim.y)",
    async_copy="extern __shared__ __align__(16) unsigned char gf_stage[];",
    runtime_unroll="#pragma unroll 4",
    masked_loads=True,
    masked_unroll={
        "U": 4,
        P.Serial: {"forward": ("for ({T} {i}_o = 0; {i}_o < {ext}; {i}_o += {U})", "{i}_o + gf_u", "{i} < {ext}")},
        P.BIDy: {"forward": ("for ({T} {i}_o = blockIdx.y; {i}_o < {ext}; {i}_o += {U} * ({T})gridDim.y)",
                             "{i}_o + gf_u * ({T})gridDim.y", "{i} < {ext}"),
                 "reverse": ("for ({T} {i}_o = ({ext} - 1 - ({T})blockIdx.y) / ({T})gridDim.y * ({T})gridDim.y "
                             "+ ({T})blockIdx.y; {i}_o >= ({T})blockIdx.y && {i}_o < {ext}; {i}_o -= {U} * ({T})gridDim.y)",
                             "{i}_o - gf_u * ({T})gridDim.y", "{i} >= ({T})blockIdx.y")}},
    sum_block=16,           # a thread's serial loop: 16 iterations (of up to 8 vector elements) per chunk
    last_iteration={P.Serial: ("{T} {i} = {ext} - 1", ""),
                    P.BIDy: ("{T} {i} = {ext} - 1", "{i} % ({T})gridDim.y == ({T})blockIdx.y")},
    grid_reduce={P.BIDy: {
        P.TIDx: {"put": "if (threadIdx.x == 0) *reinterpret_cast<{ct}*>(gf_work + {slot} * gridDim.y + blockIdx.y) = {acc};",
                 "combine": "{acc} = gf_grid_combine<gf_op_{op}, {ct}>(gf_work + {slot} * gridDim.y, gf_smem);"},
        # a column per threadIdx.x: slots [reduction][block][column], so a warp's accesses are
        # consecutive. Slot n of the workspace: gridDim.y * rows 8-byte entries from n * gridDim.y * rows,
        # holding [block][column] partials of the value's own type (4-byte floats packed: a
        # warp's loads of a lane's partials cover whole sectors; at 8-byte spacing a channels-
        # last batch norm's gathers read 8x the sectors they used, 79% of its L2 traffic)
        P.TIDy: {"put": "if (threadIdx.y == 0 && {valid}) "
                        "gf_slot_of<{ct}>(gf_work, {n}, {rows})[(long long)blockIdx.y * {rows} + {row}] = {acc};",
                 "combine": "{acc} = gf_grid_combine_y<gf_op_{op}, {ct}>(gf_slot_of<{ct}>(gf_work, {n}, {rows}) + {row}, "
                            "{rows}, {valid}, gf_smem);",
                 # the partials of several values read in one loop (their loads in flight together)
                 "loop": "if ({valid}) for (unsigned int gf_k = threadIdx.y; gf_k < gridDim.y; gf_k += blockDim.y)",
                 "load": "gf_ld_partial(gf_slot_of<{ct}>(gf_work, {n}, {rows}) + (long long)gf_k * {rows} + {row})",
                 # a kept vector's lanes (adjacent columns) in 16-byte loads where aligned
                 "load_lanes": "gf_ld_partials<{lanes}>({dst}, gf_slot_of<{ct}>(gf_work, {n}, {rows}) + "
                               "(long long)gf_k * {rows} + {row});"},
        "last": "if (!gf_grid_last(gf_sem + {row}, gf_smem)) {leave};",
        "sync_decl": "unsigned int gf_gen = 0;",
        "sync": "gf_grid_sync(gf_sem + blockIdx.x, gf_gen);",
        "leader": "blockIdx.y == 0",
        # the grid-stride loop backwards: from this block's last chunk down to blockIdx.y
        "reverse": "for ({T} {i} = ({ext} - 1 - ({T})blockIdx.y) / ({T})gridDim.y * ({T})gridDim.y + ({T})blockIdx.y; "
                   "{i} >= ({T})blockIdx.y && {i} < {ext}; {i} -= ({T})gridDim.y)"}},
    nan_combine={("max", torch.float32): "{a} = gf_fmax_nan({a}, {v});",
                 ("min", torch.float32): "{a} = gf_fmin_nan({a}, {v});"},
    thread_reduce={P.TIDx: "{acc} = gf_block_reduce_x<gf_op_{op}>({acc}, gf_smem);",
                   P.TIDy: "{acc} = gf_block_reduce_y<gf_op_{op}>({acc}, gf_smem);"},
    thread_reduce2={P.TIDx: "gf_block_reduce2_x<gf_op_{op}>({a}, {b}, gf_smem);"},
    thread_reduce_pair={("softmax", P.TIDx): "gf_block_online_x({a}, {b}, gf_smem);",
                        ("variance", P.TIDx): "gf_block_chan_x({n}, {a}, {b}, gf_smem);"},
    shared_decl="__shared__ double gf_smem[1024];",
    # 8 KB of static shared memory per block had capped how many blocks of a row kernel fit an
    # SM (layer norm [16384, 4096] bf16 on an H200: 72% of copy bandwidth, 1 KB: 82% uncapped)
    shared_x_decl="__shared__ double gf_smem[128];",
    # (32 KB: outer kernels run blocks of 1024 threads, at most two per SM whatever they declare)
    thread_reduce_k={P.TIDy: "gf_block_reduce_y_k<gf_op_{op}, {ct}, {k}, {r}, {bx}, {by}, {cap}>({arr}, gf_smem);"},
    shared_k_doubles=4096,
    reduction_prelude=CUDA_REDUCTION,
    constants={"GF_UNROLL_ALL": '_Pragma("unroll")', "GF_INF_F": "__int_as_float(0x7f800000)", "GF_NAN_F": "__int_as_float(0x7fffffff)",
               "GF_INF_D": "__longlong_as_double(0x7ff0000000000000LL)",
               "GF_NAN_D": "__longlong_as_double(0x7fffffffffffffffLL)"},
)

DIALECTS = {"cpp": CPP, "cuda": CUDA}
