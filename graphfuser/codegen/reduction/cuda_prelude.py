"""The CUDA dialect's reduction prelude: the device functions only reduction kernels use
(asynchronous copies, warp and block combines, the split-row arrival protocol), appended after
the common prelude by ``dialects.CUDA`` so that pointwise sources do not change."""
from __future__ import annotations

# Reduction kernels only (appended after the prelude, so pointwise sources do not change).
# Op functors give the combine and identity the cross-thread reductions use; blockDim.x is a
# multiple of 32 (or 32 at least) whenever threads along x reduce together.
CUDA_REDUCTION = r"""
/* Asynchronous global -> shared copies of B = 4, 8 or 16 bytes (cp.async, sm_80+; a plain
   copy before). Each thread waits for its own copies only: it alone reads what it copied. */
template <int B> struct gf_bytes;
template <> struct gf_bytes<4> { typedef unsigned int t; };
template <> struct gf_bytes<8> { typedef uint2 t; };
template <> struct gf_bytes<16> { typedef uint4 t; };
template <int B> GF_FN void gf_cp_async(unsigned char* dst, const void* src) {
#if __CUDA_ARCH__ >= 800
  const unsigned int s = (unsigned int)__cvta_generic_to_shared(dst);
  if (B == 16) asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" :: "r"(s), "l"(src) : "memory");
  else asm volatile("cp.async.ca.shared.global [%0], [%1], %2;" :: "r"(s), "l"(src), "n"(B) : "memory");
#else
  *reinterpret_cast<typename gf_bytes<B>::t*>(dst) = *reinterpret_cast<const typename gf_bytes<B>::t*>(src);
#endif
}
GF_FN void gf_cp_commit() {
#if __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;" ::: "memory");
#endif
}
template <int N> GF_FN void gf_cp_wait() {
#if __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;" :: "n"(N) : "memory");
#endif
}
#if __CUDA_ARCH__ >= 800
GF_FN float gf_fmax_nan(float a, float b) { float r; asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b)); return r; }
GF_FN float gf_fmin_nan(float a, float b) { float r; asm("min.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b)); return r; }
#else
GF_FN float gf_fmax_nan(float a, float b) { return (a != a || b != b) ? a + b : (a > b ? a : b); }
GF_FN float gf_fmin_nan(float a, float b) { return (a != a || b != b) ? a + b : (a < b ? a : b); }
#endif
template <typename T> GF_FN T gf_lowest() { return (T)0; }
template <> GF_FN float gf_lowest<float>() { return -GF_INF_F; }
template <> GF_FN double gf_lowest<double>() { return -GF_INF_D; }
template <> GF_FN long long gf_lowest<long long>() { return -9223372036854775807LL - 1; }
template <> GF_FN int gf_lowest<int>() { return -2147483647 - 1; }
template <> GF_FN short gf_lowest<short>() { return -32768; }
template <> GF_FN signed char gf_lowest<signed char>() { return -128; }
template <typename T> GF_FN T gf_highest() { return (T)0; }
template <> GF_FN float gf_highest<float>() { return GF_INF_F; }
template <> GF_FN double gf_highest<double>() { return GF_INF_D; }
template <> GF_FN long long gf_highest<long long>() { return 9223372036854775807LL; }
template <> GF_FN int gf_highest<int>() { return 2147483647; }
template <> GF_FN short gf_highest<short>() { return 32767; }
template <> GF_FN signed char gf_highest<signed char>() { return 127; }
template <> GF_FN unsigned char gf_highest<unsigned char>() { return 255; }
/* Softmax's online max m and sum of exponentials s (render: a fused pair) advanced by a vector
   of N values: the lanes' max first, then one rescale of s and one exp per lane, where the
   element-wise update takes two exps per element. As element-wise: the max skips NaN lanes
   (the flag nan records them) and their exp makes s NaN, a +inf lane makes s NaN (inf - inf),
   -inf lanes add 0, and a vector of -inf alone leaves m and s as they were. */
template <int N, typename T> GF_FN void gf_online_vec(T& m, T& s, int& nan, const T* x) {
  T mv = gf_lowest<T>();
  #pragma unroll
  for (int i = 0; i < N; ++i) mv = x[i] > mv ? x[i] : mv;
  const T o = m;
  m = mv > m ? mv : m;
  s = s * (o == m ? (T)1 : gf_exp(o - m));
  #pragma unroll
  for (int i = 0; i < N; ++i) {
    s += x[i] == gf_lowest<T>() ? (T)0 : gf_exp(x[i] - m);
    nan |= x[i] != x[i];
  }
}
struct gf_op_sum {
  template <typename T> static GF_FN T f(T a, T b) { return a + b; }
  template <typename T> static GF_FN T id() { return (T)0; }
};
struct gf_op_prod {
  template <typename T> static GF_FN T f(T a, T b) { return a * b; }
  template <typename T> static GF_FN T id() { return (T)1; }
};
struct gf_op_max {
  template <typename T> static GF_FN T f(T a, T b) { return gf_maximum(a, b); }
  template <typename T> static GF_FN T id() { return gf_lowest<T>(); }
};
struct gf_op_min {
  template <typename T> static GF_FN T f(T a, T b) { return gf_minimum(a, b); }
  template <typename T> static GF_FN T id() { return gf_highest<T>(); }
};
/* The lanes of this thread's group of w (a power of two) consecutive threads: a block of
   several rows gives each row blockDim.x < 32 threads, and the rows of one warp may leave
   their loop at different times, so a row's shuffles name its own lanes only. */
GF_FN unsigned int gf_group_mask(int w) {
  if (w >= 32) return 0xffffffffu;
  const unsigned int lane = (threadIdx.y * blockDim.x + threadIdx.x) & 31u;
  return ((1u << w) - 1u) << (lane & ~(unsigned int)(w - 1));
}
template <typename Op, typename T> GF_FN T gf_warp_reduce(T v, int width) {
  const unsigned int mask = gf_group_mask(width);
  for (int o = width / 2; o > 0; o >>= 1) v = Op::f(v, static_cast<T>(__shfl_xor_sync(mask, v, o)));
  return v;
}
template <typename Op, typename T> GF_FN T gf_block_reduce_x(T v, double* raw) {
  T* smem = reinterpret_cast<T*>(raw);
  v = gf_warp_reduce<Op>(v, blockDim.x < 32 ? blockDim.x : 32);
  if (blockDim.x <= 32) return v;
  const int lane = threadIdx.x & 31, base = threadIdx.y * 32;
  __syncthreads();
  if (lane == 0) smem[base + (threadIdx.x >> 5)] = v;
  __syncthreads();
  T r = lane < (int)(blockDim.x >> 5) ? smem[base + lane] : Op::template id<T>();
  return gf_warp_reduce<Op>(r, 32);
}
template <typename Op, typename T> GF_FN void gf_block_reduce2_x(T& a, T& b, double* raw) {
  T* smem = reinterpret_cast<T*>(raw);
  const int w = blockDim.x < 32 ? blockDim.x : 32;
  a = gf_warp_reduce<Op>(a, w);
  b = gf_warp_reduce<Op>(b, w);
  if (blockDim.x <= 32) return;
  const int lane = threadIdx.x & 31, base = threadIdx.y * 64;
  __syncthreads();
  if (lane == 0) { smem[base + (threadIdx.x >> 5)] = a; smem[base + 32 + (threadIdx.x >> 5)] = b; }
  __syncthreads();
  const bool in = lane < (int)(blockDim.x >> 5);
  a = gf_warp_reduce<Op>(in ? smem[base + lane] : Op::template id<T>(), 32);
  b = gf_warp_reduce<Op>(in ? smem[base + 32 + lane] : Op::template id<T>(), 32);
}
template <typename T> GF_FN void gf_online_merge(T& m, T& s, T m2, T s2) {
  const T mn = gf_maximum(m, m2);
  s = (m == mn ? s : s * gf_exp(m - mn)) + (m2 == mn ? s2 : s2 * gf_exp(m2 - mn));
  m = mn;
}
template <typename T> GF_FN void gf_block_online_x(T& m, T& s, double* raw) {
  T* smem = reinterpret_cast<T*>(raw);
  const int w = blockDim.x < 32 ? blockDim.x : 32;
  const unsigned int mask = gf_group_mask(w);
  for (int o = w / 2; o > 0; o >>= 1)
    gf_online_merge(m, s, __shfl_xor_sync(mask, m, o), __shfl_xor_sync(mask, s, o));
  if (blockDim.x <= 32) return;
  const int lane = threadIdx.x & 31, base = threadIdx.y * 64;
  __syncthreads();
  if (lane == 0) { smem[base + (threadIdx.x >> 5)] = m; smem[base + 32 + (threadIdx.x >> 5)] = s; }
  __syncthreads();
  const bool in = lane < (int)(blockDim.x >> 5);
  T m2 = in ? smem[base + lane] : gf_lowest<T>(), s2 = in ? smem[base + 32 + lane] : (T)0;
  for (int o = 16; o > 0; o >>= 1)
    gf_online_merge(m2, s2, __shfl_xor_sync(0xffffffffu, m2, o), __shfl_xor_sync(0xffffffffu, s2, o));
  m = m2;
  s = s2;
}
template <typename T> GF_FN void gf_chan_merge(T& n, T& s, T& m2, T n2, T s2, T m22) {
  if (n2 == (T)0) return;
  if (n == (T)0) { n = n2; s = s2; m2 = m22; return; }
  const T nn = n + n2, d = s2 / n2 - s / n;
  m2 = m2 + m22 + d * d * (n * n2 / nn);
  s = s + s2;
  n = nn;
}
template <typename T> GF_FN void gf_block_chan_x(T& n, T& s, T& m2, double* raw) {
  T* smem = reinterpret_cast<T*>(raw);
  const int w = blockDim.x < 32 ? blockDim.x : 32;
  const unsigned int mask = gf_group_mask(w);
  for (int o = w / 2; o > 0; o >>= 1) {
    const T n2 = __shfl_xor_sync(mask, n, o), s2 = __shfl_xor_sync(mask, s, o);
    const T q2 = __shfl_xor_sync(mask, m2, o);
    gf_chan_merge(n, s, m2, n2, s2, q2);
  }
  if (blockDim.x <= 32) return;
  const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, base = threadIdx.y * 96;
  __syncthreads();
  if (lane == 0) { smem[base + wid] = n; smem[base + 32 + wid] = s; smem[base + 64 + wid] = m2; }
  __syncthreads();
  const bool in = lane < (int)(blockDim.x >> 5);
  n = in ? smem[base + lane] : (T)0;
  s = in ? smem[base + 32 + lane] : (T)0;
  m2 = in ? smem[base + 64 + lane] : (T)0;
  for (int o = 16; o > 0; o >>= 1) {
    const T n2 = __shfl_xor_sync(0xffffffffu, n, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);
    const T q2 = __shfl_xor_sync(0xffffffffu, m2, o);
    gf_chan_merge(n, s, m2, n2, s2, q2);
  }
}
/* Across threadIdx.y (outer kernels: the row threads of a column), a tree in shared memory:
   each step folds the upper half of the rows left onto the lower, every thread reads the
   column's total at the end. (Every thread summing the whole column itself read the shared
   memory blockDim.y times per thread: with 32 x 32 threads, 32K reads per reduction, which
   made the reductions the larger part of a channels-last batch norm of 64 channels.) The
   same tree in every block: identical values for identical inputs. */
template <typename Op, typename T> GF_FN T gf_block_reduce_y(T v, double* raw) {
  T* smem = reinterpret_cast<T*>(raw);
  __syncthreads();
  T* mine = smem + threadIdx.y * blockDim.x + threadIdx.x;
  *mine = v;
  __syncthreads();
  for (unsigned n = blockDim.y; n > 1;) {
    const unsigned h = (n + 1) >> 1;
    if (threadIdx.y + h < n) *mine = Op::f(*mine, mine[h * blockDim.x]);
    __syncthreads();
    n = h;
  }
  return smem[threadIdx.x];
}
/* K values of one op, each combined across threadIdx.y at once (an outer kernel's
   accumulators: every reduction times every vector lane), in rounds of R values through shared
   memory: each round folds its R values together by gf_block_reduce_y's tree (the same values
   as one tree per value), 2 + log2(blockDim.y) barriers per round where one tree per value took
   as many per value. Row 0 of each value goes to res ([K][BX], at the end of the CAP entries of
   T the scratch holds); every thread reads its column's totals at the end. A channels-last
   batch norm's backward combines 4 reductions x 4 lanes: 16 trees of 7 barriers each (twice,
   with the blocks' partials) were most of its time on small tensors. (Folding each column in
   registers by a thread of its own measured 4% more kernel time per resnet50 step, H200; a sum
   in y order failed tests/autodiff/test_grad_accuracy.py's bound against float64. One warp per
   column folding a round's values with shuffles, two barriers a round, was slower still: 3759
   against 3392 us over resnet50's batch norm shapes, forward and backward, H200.) */
template <typename Op, typename T, int K, int R, int BX, int BY, int CAP>
GF_FN void gf_block_reduce_y_k(T* v, double* raw) {
  static_assert(R >= 1 && R * BX * BY + K * BX <= CAP, "scratch too small for the rounds");
  T* smem = reinterpret_cast<T*>(raw);
  T* res = smem + (CAP - K * BX);
  const int tx = threadIdx.x, ty = threadIdx.y;
  #pragma unroll
  for (int j0 = 0; j0 < K; j0 += R) {
    __syncthreads();
    #pragma unroll
    for (int j = j0; j < j0 + R && j < K; ++j) smem[(j - j0) * (BX * BY) + ty * BX + tx] = v[j];
    __syncthreads();
    #pragma unroll
    for (int n = BY; n > 1; n = (n + 1) >> 1) {
      const int h = (n + 1) >> 1;
      if (ty + h < n) {
        #pragma unroll
        for (int j = j0; j < j0 + R && j < K; ++j) {
          T* p = smem + (j - j0) * (BX * BY) + ty * BX + tx;
          *p = Op::f(*p, p[h * BX]);
        }
      }
      __syncthreads();
    }
    if (ty == 0) {
      #pragma unroll
      for (int j = j0; j < j0 + R && j < K; ++j) res[j * BX + tx] = smem[(j - j0) * (BX * BY) + tx];
    }
  }
  __syncthreads();
  #pragma unroll
  for (int j = 0; j < K; ++j) v[j] = res[j * BX + tx];
}
/* A row split across gridDim.y blocks: each block wrote its partials; the block that brings
   the row's counter to gridDim.y is the last, resets the counter for the next launch and,
   after a fence, reads every partial (threadFenceReduction). */
GF_FN bool gf_grid_last(unsigned int* sem, double* raw) {
  int* flag = reinterpret_cast<int*>(raw);
  __syncthreads();
  if (threadIdx.x == 0 && threadIdx.y == 0) {
    __threadfence();
    const unsigned int prev = atomicAdd(sem, 1u);
    const int last = prev == gridDim.y - 1;
    if (last) *sem = 0u;
    flag[0] = last;
  }
  __syncthreads();
  const bool last = *reinterpret_cast<volatile int*>(flag) != 0;
  __syncthreads();
  if (last) __threadfence();
  return last;
}
template <typename Op, typename T> GF_FN T gf_grid_combine(const double* work, double* raw) {
  T v = Op::template id<T>();
  for (unsigned int k = threadIdx.x; k < gridDim.y; k += blockDim.x)
    v = Op::f(v, *reinterpret_cast<const volatile T*>(work + k));
  return gf_block_reduce_x<Op>(v, raw);
}
/* Slot n of an outer split's workspace (gridDim.y * rows 8-byte entries), as partials of T
   packed [block][column]. */
template <typename T, typename I> GF_FN T* gf_slot_of(double* work, int n, I rows) {
  return reinterpret_cast<T*>(work + (long long)n * gridDim.y * rows);
}
/* A partial another block wrote before a barrier: read from L2 (ld.global.cg: never a line
   this SM's L1 kept from an earlier pass), volatile for types __ldcg does not take. */
template <typename T> GF_FN T gf_ld_partial(const T* p) { return *reinterpret_cast<const volatile T*>(p); }
template <> GF_FN float gf_ld_partial(const float* p) { return __ldcg(p); }
template <> GF_FN double gf_ld_partial(const double* p) { return __ldcg(p); }
template <> GF_FN int gf_ld_partial(const int* p) { return __ldcg(p); }
template <> GF_FN long long gf_ld_partial(const long long* p) { return __ldcg(p); }
/* N adjacent partials (a kept vector's lanes): 16-byte L2 loads where the address allows. */
template <int N, typename T> GF_FN void gf_ld_partials(T* dst, const T* p) {
  if constexpr ((N * sizeof(T)) % 16 == 0 && (sizeof(T) == 4 || sizeof(T) == 8)) {
    if ((reinterpret_cast<unsigned long long>(p) & 15) == 0) {
      #pragma unroll
      for (int i = 0; i < N; i += 16 / sizeof(T)) {
        if constexpr (sizeof(T) == 4) {
          const int4 q = __ldcg(reinterpret_cast<const int4*>(p + i));
          memcpy(dst + i, &q, 16);
        } else {
          const longlong2 q = __ldcg(reinterpret_cast<const longlong2*>(p + i));
          memcpy(dst + i, &q, 16);
        }
      }
      return;
    }
  }
  #pragma unroll
  for (int i = 0; i < N; ++i) dst[i] = gf_ld_partial(p + i);
}
/* The same for a column per threadIdx.x (outer reductions): the threads along y split the
   column's partials, then combine across y. Columns past the end read nothing. */
template <typename Op, typename T, typename I>
GF_FN T gf_grid_combine_y(const T* work, I stride, bool valid, double* raw) {
  T v = Op::template id<T>();
  if (valid)
    for (unsigned int k = threadIdx.y; k < gridDim.y; k += blockDim.y)
      v = Op::f(v, gf_ld_partial(work + (long long)k * stride));
  return gf_block_reduce_y<Op>(v, raw);
}
/* A barrier of the gridDim.y blocks that share blockIdx.x (a column tile or a row split across
   blocks), for kernels whose passes go on after a split reduction. The counter only grows:
   each barrier waits for gen += gridDim.y arrivals, so it needs no reset within a launch (the
   launcher passes zeroed counters). Every block must be resident at once: cooperative launch.
   Each block's writes before the barrier are visible to every block after it (fences around
   the arrival, as cooperative groups' grid sync does); partials are read through volatile. */
GF_FN void gf_grid_sync(unsigned int* sem, unsigned int& gen) {
  gen += gridDim.y;
  __syncthreads();
  if (threadIdx.x == 0 && threadIdx.y == 0) {
    __threadfence();
    atomicAdd(sem, 1u);
    while (*reinterpret_cast<volatile unsigned int*>(sem) < gen) {
#if __CUDA_ARCH__ >= 700
      __nanosleep(64);
#endif
    }
    __threadfence();
  }
  __syncthreads();
}
"""
