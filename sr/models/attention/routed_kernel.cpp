// Routed region attention, fused, on the CPU: the inference core of ``topk`` and ``adaptive``.
//
// For every query region r (p x p tokens) with a budget k_int[r] = t > 0, attend from its tokens to
// the tokens of its t routed key regions idx[r, :t], per head: scores, an fp32 softmax, the weighted
// sum of values. It reads the q/k/v token rows where they lie (rows of a channels-last map, any row
// stride), so no gathered key or value tensor is ever made: a region's keys and values pass through
// a small per-thread scratch (fp32, L1/L2-resident) only when they are bf16. Regions with t = 0 get
// zero rows. Same maths as sr.models.attention.routing.tiered_attention (SDPA per tier), in fp32
// throughout: inputs fp32 or bf16, accumulation and softmax fp32, output in the input's dtype
// (rounded to nearest even).
//
// Layout of the arithmetic: W query tokens of a region are the W lanes of one vector (W = 16 on
// AVX-512, so a 4 x 4 region is one register; 8 on AVX2; 4 on the baseline), so every score, exp and
// weighted sum is lane-wise with a key or value scalar broadcast: no horizontal sums and no
// transposed keys. For key token l, S[l] = sum_c k[l, c] * Qt[c] (Qt: the queries transposed, times
// d^-0.5); the softmax runs down the key axis lane by lane; Ot[c] = sum_l v[l, c] * exp(S[l] - max),
// divided by the sum once. Regions of other sizes run in chunks of W query tokens (the last padded).
//
// Vectorised by the compiler (GCC vector extensions), built three times under target attributes:
// AVX-512, AVX2 + FMA and the baseline x86-64 (the build's own target elsewhere), chosen at run time
// from what the CPU supports, so one build serves any x86-64 CPU. Parallel over query regions with
// at::parallel_for (torch's own thread pool). Called through ctypes: plain pointers, no Python or
// Tensor headers, so the build takes seconds.

#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <new>
#include <type_traits>
#include <vector>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define SR_X86 1
#endif

namespace {

template <int W>
struct Vec {  // W fp32 / int32 lanes
  typedef float f __attribute__((vector_size(W * sizeof(float))));
  typedef int32_t i __attribute__((vector_size(W * sizeof(int32_t))));
};

struct Args {
  const void* q;
  const void* k;
  const void* v;
  void* out;              // (T, C) contiguous, q's dtype
  int64_t qs, ks, vs;     // elements between token rows of q, k, v (channels are contiguous)
  const int64_t* tokens;  // (B*N, P) token ids of each region
  int64_t p;              // P, tokens per region
  const int64_t* idx;     // (B*N, K) key region ids within their image, best first
  int64_t n, kidx;        // N regions per image, K ranks per region
  const int64_t* k_int;   // (B*N,) key regions attended per query region, 0 <= t <= K
  int64_t c, heads;
  bool bf16;
};

#define SR_INLINE inline __attribute__((always_inline))

SR_INLINE float bf16_to_float(uint16_t h) {
  uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

SR_INLINE uint16_t float_to_bf16(float f) {  // round to nearest even; NaN stays NaN (branch-free)
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  return uint16_t((u & 0x7fffffffu) > 0x7f800000u ? (u >> 16) | 0x40u : rounded);
}

// A row of n elements of T -> fp32 times scale; fp32 -> a row of T (both vectorised by the compiler).
template <typename T>
SR_INLINE void load_row(const T* __restrict src, float* __restrict dst, int64_t n, float scale) {
  for (int64_t i = 0; i < n; ++i) {
    if constexpr (std::is_same_v<T, float>) dst[i] = src[i] * scale; else dst[i] = bf16_to_float(src[i]) * scale;
  }
}

template <typename T>
SR_INLINE void store_row(const float* __restrict src, T* __restrict dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    if constexpr (std::is_same_v<T, float>) dst[i] = src[i]; else dst[i] = float_to_bf16(src[i]);
  }
}

#ifdef SR_X86
// dst[j * ds + i] = src[i * ss + j] for a 16 x 16 block of floats: 64 in-register shuffles.
__attribute__((target("avx512f"))) void transpose16_avx512(const float* src, int64_t ss, float* dst, int64_t ds) {
  __m512 r[16], t[16];
  for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_ps(src + i * ss);
  for (int i = 0; i < 16; i += 2) {                  // per 128-bit lane, rows a = i, b = i + 1:
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);      // a0 b0 a1 b1
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);  // a2 b2 a3 b3
  }
  for (int i = 0; i < 16; i += 4) {                       // rows a..d = i..i+3:
    r[i] = _mm512_shuffle_ps(t[i], t[i + 2], 0x44);      // a0 b0 c0 d0
    r[i + 1] = _mm512_shuffle_ps(t[i], t[i + 2], 0xEE);  // a1 b1 c1 d1
    r[i + 2] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0x44);
    r[i + 3] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
  }
  for (int i = 0; i < 16; i += 8) {  // 128-bit lanes of rows i..i+3 with those of rows i+4..i+7
    for (int j = 0; j < 4; ++j) {
      t[i + j] = _mm512_shuffle_f32x4(r[i + j], r[i + j + 4], 0x88);
      t[i + j + 4] = _mm512_shuffle_f32x4(r[i + j], r[i + j + 4], 0xDD);
    }
  }
  for (int j = 0; j < 8; ++j) {
    r[j] = _mm512_shuffle_f32x4(t[j], t[j + 8], 0x88);
    r[j + 8] = _mm512_shuffle_f32x4(t[j], t[j + 8], 0xDD);
  }
  for (int i = 0; i < 16; ++i) _mm512_storeu_ps(dst + i * ds, r[i]);
}
#endif

// dst[j * ds + i] = src[i * ss + j] for i < rows, j < cols: 16 x 16 blocks in registers on AVX-512,
// element by element elsewhere and at the edges.
template <int W>
SR_INLINE void transpose(const float* src, int64_t ss, float* dst, int64_t ds, int64_t rows, int64_t cols) {
  int64_t full_r = 0, full_c = 0;
#ifdef SR_X86
  if constexpr (W == 16) {
    full_r = rows / 16 * 16, full_c = cols / 16 * 16;
    for (int64_t i = 0; i < full_r; i += 16)
      for (int64_t j = 0; j < full_c; j += 16) transpose16_avx512(src + i * ss + j, ss, dst + j * ds + i, ds);
  }
#endif
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = (i < full_r ? full_c : 0); j < cols; ++j) dst[j * ds + i] = src[i * ss + j];
}

// exp lane-wise for x <= 0 (Cephes' single-precision polynomial, within ~2 ulp; x below -87.3 gives
// ~1e-38). Rounds to the nearest integer by adding 1.5 * 2^23, whose low mantissa bits then hold it.
template <int W>
SR_INLINE typename Vec<W>::f vexp_neg(typename Vec<W>::f x) {
  typedef typename Vec<W>::f vf;
  typedef typename Vec<W>::i vi;
  const vf lo = vf{} - 87.3f, magic = vf{} + 12582912.0f;
  x = x < lo ? lo : x;
  const vf big = x * 1.44269504088896341f + magic;
  const vf n = big - magic;
  const vf r = x - n * 0.693359375f + n * 2.12194440e-4f;
  vf y = ((((1.9875691500e-4f * r + 1.3981999507e-3f) * r + 8.3334519073e-3f) * r + 4.1665795894e-2f) * r +
          1.6666665459e-1f) * r + 5.0000001201e-1f;
  y = y * (r * r) + r + 1.0f;
  vi bits;
  std::memcpy(&bits, &big, sizeof(bits));
  bits = (bits - 0x4B400000 + 127) << 23;  // 2^n
  vf pow2;
  std::memcpy(&pow2, &bits, sizeof(pow2));
  return y * pow2;
}

// One head of one chunk of queries: Qt, Ot (C vectors; this head's d of them from c0), the L key and
// value rows (fp32 pointers), S scratch of L vectors. D > 0 fixes the head size at compile time.
template <int W, int D>
SR_INLINE void attend_head(const typename Vec<W>::f* __restrict qt, typename Vec<W>::f* __restrict ot,
                           const float* const* krow, const float* const* vrow, typename Vec<W>::f* __restrict s,
                           int64_t L, int64_t c0, int64_t d_rt) {
  typedef typename Vec<W>::f vf;
  const int64_t d = D > 0 ? D : d_rt;
  // scores, two key tokens at a time (independent FMA chains), and their running maximum
  vf m = vf{} - 3.0e38f;
  int64_t l = 0;
  for (; l + 2 <= L; l += 2) {
    const float* k0 = krow[l] + c0;
    const float* k1 = krow[l + 1] + c0;
    vf a0{}, a1{};
    for (int64_t dd = 0; dd < d; ++dd) {
      a0 += k0[dd] * qt[c0 + dd];
      a1 += k1[dd] * qt[c0 + dd];
    }
    s[l] = a0;
    s[l + 1] = a1;
    m = a0 > m ? a0 : m;
    m = a1 > m ? a1 : m;
  }
  for (; l < L; ++l) {
    const float* k0 = krow[l] + c0;
    vf a0{};
    for (int64_t dd = 0; dd < d; ++dd) a0 += k0[dd] * qt[c0 + dd];
    s[l] = a0;
    m = a0 > m ? a0 : m;
  }
  // softmax down the key axis, lane-wise, in fp32
  vf sum{};
  for (l = 0; l < L; ++l) {
    const vf e = vexp_neg<W>(s[l] - m);
    s[l] = e;
    sum += e;
  }
  // weighted sum of values, normalised once at the end
  const vf inv = 1.0f / sum;
  if constexpr (D > 0) {
    // The accumulators must stay in registers: 16 of them fill AVX2's 16, so there the head's channels
    // go in two passes of 8 (the second reads the value rows from L1); AVX-512 has 32 registers.
    constexpr int H = (W >= 16 || D % 8 != 0) ? D : 8;
    for (int h0 = 0; h0 < D; h0 += H) {
      vf acc[H];
      for (int dd = 0; dd < H; ++dd) acc[dd] = vf{};
      for (l = 0; l < L; ++l) {
        const float* v0 = vrow[l] + c0 + h0;
        const vf e = s[l];
        for (int dd = 0; dd < H; ++dd) acc[dd] += v0[dd] * e;
      }
      for (int dd = 0; dd < H; ++dd) ot[c0 + h0 + dd] = acc[dd] * inv;
    }
  } else {
    for (int64_t dd = 0; dd < d; ++dd) ot[c0 + dd] = vf{};
    for (l = 0; l < L; ++l) {
      const float* v0 = vrow[l] + c0;
      const vf e = s[l];
      for (int64_t dd = 0; dd < d; ++dd) ot[c0 + dd] += v0[dd] * e;
    }
    for (int64_t dd = 0; dd < d; ++dd) ot[c0 + dd] *= inv;
  }
}

template <typename T>
SR_INLINE const T* row(const void* base, int64_t stride, int64_t token) {
  return static_cast<const T*>(base) + token * stride;
}

// Region r's query, key and value rows into the caches, every cache line of their C channels. The
// routed key regions lie anywhere in the map, and a region's token rows are a map row apart, so the
// hardware prefetcher cannot guess them: without this, the first touch of each key and value row stalls.
template <typename T>
SR_INLINE void prefetch_region(const Args& a, int64_t r) {
  const int64_t t = a.k_int[r];
  if (t <= 0) return;
  const int64_t C = a.c, P = a.p, K = a.kidx, image = r / a.n;
  constexpr int64_t per_line = 64 / sizeof(T);
  auto fetch = [&](const T* p) {
    for (int64_t c = 0; c < C; c += per_line) __builtin_prefetch(p + c, 0, 3);
    __builtin_prefetch(p + C - 1, 0, 3);  // a row that straddles one more line
  };
  const int64_t* qtok = a.tokens + r * P;
  for (int64_t u = 0; u < P; ++u) fetch(row<T>(a.q, a.qs, qtok[u]));
  for (int64_t j = 0; j < t; ++j) {
    const int64_t* ktok = a.tokens + (a.idx[r * K + j] + image * a.n) * P;
    for (int64_t u = 0; u < P; ++u) {
      fetch(row<T>(a.k, a.ks, ktok[u]));
      fetch(row<T>(a.v, a.vs, ktok[u]));
    }
  }
}

// Query regions [begin, end): the whole per-region computation; element type T (float, or uint16_t
// for bf16), W lanes, head size D (0: any). Each region's rows are prefetched one region ahead.
template <typename T, int W, int D>
SR_INLINE void attend_regions(const Args& a, int64_t begin, int64_t end) {
  typedef typename Vec<W>::f vf;
  constexpr bool F32 = std::is_same_v<T, float>;
  const int64_t C = a.c, P = a.p, d = C / a.heads, K = a.kidx;
  const int64_t Lmax = std::max<int64_t>(K * P, 1);
  const float scale = 1.0f / __builtin_sqrtf(float(d));
  // One 64-byte aligned scratch (in floats): Qt and Ot (C vectors each), S (L vectors), a chunk's
  // query / output rows in fp32 (W x C), and for bf16 the region's key and value rows in fp32 (L x C
  // each): a few tens of KB, in L1/L2.
  const int64_t floats = (2 * C + Lmax) * W + W * C + (F32 ? 0 : 2 * Lmax * C);
  std::unique_ptr<float, decltype(&std::free)> scratch(
      static_cast<float*>(std::aligned_alloc(64, ((floats * sizeof(float) + 63) / 64) * 64)), &std::free);
  if (!scratch) throw std::bad_alloc();
  vf* qt = reinterpret_cast<vf*>(scratch.get());
  vf* ot = qt + C;
  vf* s = ot + C;
  float* rows = reinterpret_cast<float*>(s + Lmax);  // (W, C): queries in, outputs out
  float* kf = rows + W * C;
  float* vf32 = kf + Lmax * C;
  std::vector<const float*> krow(Lmax), vrow(Lmax);
  if (begin < end) prefetch_region<T>(a, begin);
  for (int64_t r = begin; r < end; ++r) {
    if (r + 1 < end) prefetch_region<T>(a, r + 1);
    const int64_t* qtok = a.tokens + r * P;
    const int64_t t = a.k_int[r];
    if (t <= 0) {  // no attention: zero output rows
      for (int64_t i = 0; i < P; ++i) std::memset(static_cast<T*>(a.out) + qtok[i] * C, 0, C * sizeof(T));
      continue;
    }
    const int64_t image = r / a.n, L = t * P;
    for (int64_t j = 0; j < t; ++j) {
      const int64_t* ktok = a.tokens + (a.idx[r * K + j] + image * a.n) * P;
      for (int64_t u = 0; u < P; ++u) {
        const int64_t l = j * P + u;
        if constexpr (F32) {
          krow[l] = row<float>(a.k, a.ks, ktok[u]);
          vrow[l] = row<float>(a.v, a.vs, ktok[u]);
        } else {
          load_row(row<T>(a.k, a.ks, ktok[u]), kf + l * C, C, 1.0f);
          load_row(row<T>(a.v, a.vs, ktok[u]), vf32 + l * C, C, 1.0f);
          krow[l] = kf + l * C;
          vrow[l] = vf32 + l * C;
        }
      }
    }
    for (int64_t q0 = 0; q0 < P; q0 += W) {
      const int64_t nq = std::min<int64_t>(W, P - q0);
      for (int64_t i = 0; i < W; ++i) {
        if (i < nq) load_row(row<T>(a.q, a.qs, qtok[q0 + i]), rows + i * C, C, scale);
        else std::memset(rows + i * C, 0, C * sizeof(float));
      }
      transpose<W>(rows, C, reinterpret_cast<float*>(qt), W, W, C);  // Qt[c][i] = rows[i][c]
      for (int64_t h = 0; h < a.heads; ++h) attend_head<W, D>(qt, ot, krow.data(), vrow.data(), s, L, h * d, d);
      transpose<W>(reinterpret_cast<const float*>(ot), W, rows, C, C, W);  // rows[i][c] = Ot[c][i]
      for (int64_t i = 0; i < nq; ++i) store_row(rows + i * C, static_cast<T*>(a.out) + qtok[q0 + i] * C, C);
    }
  }
}

template <int W>
SR_INLINE void attend_any(const Args& a, int64_t begin, int64_t end) {
  const bool d16 = a.c == 16 * a.heads;
  if (a.bf16) {
    if (d16) attend_regions<uint16_t, W, 16>(a, begin, end); else attend_regions<uint16_t, W, 0>(a, begin, end);
  } else {
    if (d16) attend_regions<float, W, 16>(a, begin, end); else attend_regions<float, W, 0>(a, begin, end);
  }
}

#ifdef SR_X86
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma,prefer-vector-width=512")))
void attend_avx512(const Args& a, int64_t begin, int64_t end) { attend_any<16>(a, begin, end); }
__attribute__((target("avx2,fma"))) void attend_avx2(const Args& a, int64_t begin, int64_t end) {
  attend_any<8>(a, begin, end);
}
#endif
void attend_base(const Args& a, int64_t begin, int64_t end) { attend_any<4>(a, begin, end); }

typedef void (*Impl)(const Args&, int64_t, int64_t);

Impl impl_for(int isa) {  // 2 AVX-512, 1 AVX2, 0 baseline
#ifdef SR_X86
  if (isa == 2) return attend_avx512;
  if (isa == 1) return attend_avx2;
#endif
  return isa == 0 ? attend_base : nullptr;
}

}  // namespace

extern "C" {

// The best variant this CPU runs: 2 AVX-512 (F, BW, VL, DQ), 1 AVX2 + FMA, 0 baseline.
int sr_routed_best_isa() {
#ifdef SR_X86
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))
    return 2;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return 1;
#endif
  return 0;
}

// Returns 0; 1 for a variant this build or CPU lacks; 2 for an exception (out of memory).
int sr_routed_attention(const void* q, const void* k, const void* v, void* out, int64_t qs, int64_t ks,
                        int64_t vs, const int64_t* tokens, int64_t p, const int64_t* idx, int64_t n,
                        int64_t kidx, const int64_t* k_int, int64_t regions, int64_t c, int64_t heads,
                        int bf16, int isa) {
  if (isa < 0) isa = sr_routed_best_isa();
  if (isa > sr_routed_best_isa()) return 1;
  Impl impl = impl_for(isa);
  if (impl == nullptr) return 1;
  const Args a{q, k, v, out, qs, ks, vs, tokens, p, idx, n, kidx, k_int, c, heads, bf16 != 0};
  try {
    at::parallel_for(0, regions, 8, [&](int64_t begin, int64_t end) { impl(a, begin, end); });
  } catch (const std::exception&) {
    return 2;
  }
  return 0;
}

}  // extern "C"
