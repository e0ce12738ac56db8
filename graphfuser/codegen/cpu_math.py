"""C++ dialect preludes for math: an opaque atan (against gcc's folds) and branch-free float
exp / tanh / erf that simd loops vectorize."""

# gcc folds sin(atan(x)) and cos(atan(x)) once errno is off (-fno-math-errno): into
# x / sqrt(x * x + 1) and 1 / sqrt(x * x + 1) for small |x|, and copysign(1, x) and 0 past a
# bound, where NaN lands, so sin(atan(NaN)) came out 1 and cos(atan(NaN)) 0 (eager: NaN; fuzz
# graph 371 of CPU seed 36666). atan's result passes through an empty asm that the folds cannot
# see through (libm's atanf is a scalar call either way: simd loops do not vectorize it).
_CPU_OPAQUE = r"""
#if defined(__x86_64__) || defined(__i386__)
#define GF_OPAQUE(v) __asm__("" : "+x"(v))
#elif defined(__aarch64__)
#define GF_OPAQUE(v) __asm__("" : "+w"(v))
#else
#define GF_OPAQUE(v) __asm__("" : "+m"(v))
#endif
static inline float gf_atanf_opaque(float x) { float r = atanf(x); GF_OPAQUE(r); return r; }
static inline double gf_atan_opaque(double x) { double r = atan(x); GF_OPAQUE(r); return r; }
"""

# Branch-free float exp/tanh/erf for the CPU dialect: simd loops vectorize them (libm's scalar
# calls do not). Cephes-style range reduction and polynomials, within ~2 ulp of libm (erf: within
# 2e-7 absolute); NaN, infinities and signed zeros propagate as in libm (tanh(-0.0) had been +0.0,
# which atan2 turned into 0 where eager gives -pi: fuzz graph 166 of CPU seed 33910).
_CPU_VECTOR_MATH = r"""
static inline float gf_vexpf(float x) {
  float xc = x > 88.72283f ? 88.72283f : (x < -103.972f ? -103.972f : x);
  float n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  float r = xc - n * 0.693359375f + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  int k = (int)n;
  int k1 = k / 2;
  int b1 = (k1 + 127) << 23, b2 = (k - k1 + 127) << 23;
  float s1, s2;
  memcpy(&s1, &b1, 4);
  memcpy(&s2, &b2, 4);
  float y = p * s1 * s2;
  y = x > 88.72283f ? __builtin_inff() : y;
  y = x < -103.972f ? 0.0f : y;
  return x != x ? x : y;
}
static inline float gf_vtanhf(float x) {
  float a = x < 0 ? -x : x;
  float z = x * x;
  float small = ((((-5.70498872745e-3f * z + 2.06390887954e-2f) * z - 5.37397155531e-2f) * z
                  + 1.33314422036e-1f) * z - 3.33332819422e-1f) * z * x + x;
  float e = gf_vexpf(2.0f * a);
  float big = 1.0f - 2.0f / (e + 1.0f);
  big = x < 0 ? -big : big;
  float y = a < 0.625f ? small : big;
  y = a == 0.0f ? x : y;                /* tanh(-0) is -0: x + x * z * p had made it +0 */
  return x != x ? x : y;
}
static inline float gf_verff(float x) {
  float z = x < 0 ? -x : x;
  float t = 1.0f / (1.0f + 0.5f * z);
  float q = -z * z - 1.26551223f + t * (1.00002368f + t * (0.37409196f + t * (0.09678418f + t * (-0.18628806f
            + t * (0.27886807f + t * (-1.13520398f + t * (1.48851587f + t * (-0.82215223f + t * 0.17087277f))))))));
  float big = 1.0f - t * gf_vexpf(q);
  big = x < 0 ? -big : big;
  float x2 = x * x;
  float small = x * (1.1283791670955126f + x2 * (-0.37612638903183754f + x2 * (0.11283791670955126f
                + x2 * (-0.026866170645131252f + x2 * (0.005223977625442188f + x2 * (-0.0008548327023450852f
                + x2 * 0.00012055332981789664f))))));
  float y = z < 0.5f ? small : big;
  return x != x ? x : y;
}
"""
