// y = x + bilinear_upsample(s): the end of a stride > 1 attention block at CPU inference, in one pass.
//
// s (B, h', w', C) and x, y (B, h, w, C): channels-last rows, channels contiguous. The bilinear weights
// are F.interpolate(s, size=(h, w), mode="bilinear", align_corners=False)'s (source = (dst + 0.5) *
// h' / h - 0.5, clamped at 0), computed in fp32; the sum with x is rounded once (today's path rounds
// the upsampled map to bf16, then the sum: within one bf16 step of it; fp32 agrees to rounding).
// Instead of three passes over the full-size map (write the upsampled map, read it and x, write the
// sum) it reads x once and writes y once. fp32 or bf16; AVX-512 / AVX2 / baseline variants chosen at
// run time; parallel over output rows with at::parallel_for. Compiled with routed_kernel.cpp.

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <exception>
#include <type_traits>
#include <vector>

namespace {

struct UpArgs {
  const void* s;
  const void* x;
  void* y;
  int64_t b, hs, ws, h, w, c;
  bool bf16;
};

#define SR_INLINE inline __attribute__((always_inline))

SR_INLINE float up_bf16_to_float(uint16_t v) {
  uint32_t u = uint32_t(v) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

SR_INLINE uint16_t up_float_to_bf16(float f) {  // round to nearest even; NaN stays NaN
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  return uint16_t((u & 0x7fffffffu) > 0x7f800000u ? (u >> 16) | 0x40u : rounded);
}

template <typename T>
SR_INLINE float to_f(T v) {
  if constexpr (std::is_same_v<T, float>) return v; else return up_bf16_to_float(v);
}

// PyTorch's source index and weights for one output coordinate (area_pixel_compute_source_index).
SR_INLINE void source(int64_t dst, int64_t in, float scale, int64_t& i0, int64_t& i1, float& l0, float& l1) {
  // fused multiply-add in every variant, as torch's own build computes it: the weights then agree
  float src = std::fma(scale, float(dst) + 0.5f, -0.5f);
  if (src < 0) src = 0;
  i0 = std::min<int64_t>(int64_t(src), in - 1);
  i1 = i0 + (i0 < in - 1 ? 1 : 0);
  l1 = std::min(std::max(src - float(i0), 0.0f), 1.0f);
  l0 = 1.0f - l1;
}

template <typename T>
SR_INLINE void upsample_rows(const UpArgs& a, int64_t begin, int64_t end) {
  const int64_t C = a.c;
  const float sh = float(a.hs) / float(a.h), sw = float(a.ws) / float(a.w);
  std::vector<int64_t> j0(a.w), j1(a.w);
  std::vector<float> m0(a.w), m1(a.w), blend(a.ws * C);  // blend: the two source rows mixed, fp32
  for (int64_t j = 0; j < a.w; ++j) source(j, a.ws, sw, j0[j], j1[j], m0[j], m1[j]);
  const T* s = static_cast<const T*>(a.s);
  const T* x = static_cast<const T*>(a.x);
  T* y = static_cast<T*>(a.y);
  int64_t last = -1;  // the (image, i0, i1, l1) the blend row holds, as one key
  float last_l1 = -1.0f;
  for (int64_t row = begin; row < end; ++row) {  // row = image * h + i
    const int64_t img = row / a.h, i = row % a.h;
    int64_t i0, i1;
    float l0, l1;
    source(i, a.hs, sh, i0, i1, l0, l1);
    const int64_t key = (img * a.hs + i0) * 2 + (i1 != i0);
    if (key != last || l1 != last_l1) {  // vertical blend of the source rows, once per distinct (row, weight)
      const T* __restrict s0 = s + (img * a.hs + i0) * a.ws * C;
      const T* __restrict s1 = s + (img * a.hs + i1) * a.ws * C;
      float* __restrict bl = blend.data();
      for (int64_t e = 0; e < a.ws * C; ++e) bl[e] = l0 * to_f(s0[e]) + l1 * to_f(s1[e]);
      last = key, last_l1 = l1;
    }
    const float* bl = blend.data();
    const T* xr = x + row * a.w * C;
    T* yr = y + row * a.w * C;
    for (int64_t j = 0; j < a.w; ++j) {
      const float* __restrict b0 = bl + j0[j] * C;
      const float* __restrict b1 = bl + j1[j] * C;
      const float w0 = m0[j], w1 = m1[j];
      const T* __restrict xp = xr + j * C;
      T* __restrict yp = yr + j * C;
      for (int64_t ch = 0; ch < C; ++ch) {
        const float sum = to_f(xp[ch]) + (w0 * b0[ch] + w1 * b1[ch]);
        if constexpr (std::is_same_v<T, float>) yp[ch] = sum; else yp[ch] = up_float_to_bf16(sum);
      }
    }
  }
}

SR_INLINE void upsample_any(const UpArgs& a, int64_t begin, int64_t end) {
  if (a.bf16) upsample_rows<uint16_t>(a, begin, end); else upsample_rows<float>(a, begin, end);
}

#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma,prefer-vector-width=512")))
void upsample_avx512(const UpArgs& a, int64_t begin, int64_t end) { upsample_any(a, begin, end); }
__attribute__((target("avx2,fma"))) void upsample_avx2(const UpArgs& a, int64_t begin, int64_t end) {
  upsample_any(a, begin, end);
}
#endif
void upsample_base(const UpArgs& a, int64_t begin, int64_t end) { upsample_any(a, begin, end); }

}  // namespace

extern "C" int sr_routed_best_isa();

extern "C" int sr_upsample_add(const void* s, const void* x, void* y, int64_t b, int64_t hs, int64_t ws, int64_t h,
                               int64_t w, int64_t c, int bf16, int isa) {
  if (isa < 0) isa = sr_routed_best_isa();
  if (isa > sr_routed_best_isa()) return 1;
  void (*impl)(const UpArgs&, int64_t, int64_t) = upsample_base;
#if defined(__x86_64__) && defined(__GNUC__)
  if (isa == 2) impl = upsample_avx512;
  if (isa == 1) impl = upsample_avx2;
#endif
  const UpArgs a{s, x, y, b, hs, ws, h, w, c, bf16 != 0};
  try {
    at::parallel_for(0, b * h, 4, [&](int64_t begin, int64_t end) { impl(a, begin, end); });
  } catch (const std::exception&) {
    return 2;
  }
  return 0;
}
