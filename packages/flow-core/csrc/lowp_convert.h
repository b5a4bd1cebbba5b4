// Conversions between float32 and bfloat16 / float16, shared by lowp.cpp (whole-array casts) and
// lowp_gemm.cpp (panels of a 16-bit GEMM), so both round alike:
//  * float32 -> bfloat16 as ml_dtypes' astype: round to nearest even, subnormals kept, a NaN
//    becomes the quiet NaN 0x7fc0 with its sign;
//  * bfloat16 -> float32: the 16 bits shifted up (exact, NaN payloads kept);
//  * float32 <-> float16 as NumPy's astype (round to nearest even; a NaN keeps the top bits of its
//    payload). The range loops use F16C when the CPU has it (lowp.cpp), redoing NaN lanes in scalar code.
// Values are passed as their bits (std::uint32_t for float32).
#pragma once

#include <cstdint>
#include <cstring>

namespace flow_native {
namespace lowp {

inline std::uint32_t f2u(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

inline float u2f(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// ---------------------------------------------------------------------------
// scalar conversions (exact references; the vector loops must agree with them)

inline std::uint16_t f32_to_bf16_1(std::uint32_t u) {
  // branch-free so that the loop below vectorises
  const std::uint32_t nan = ((u & 0x7fffffffu) > 0x7f800000u);
  const std::uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const std::uint32_t qnan = ((u >> 16) & 0x8000u) | 0x7fc0u;
  return static_cast<std::uint16_t>(nan ? qnan : rounded);
}

// NumPy's NaN rule (npy_floatbits_to_halfbits): keep the top 10 payload bits, never 0.
inline std::uint16_t f32_nan_to_f16(std::uint32_t u) {
  std::uint16_t sig = static_cast<std::uint16_t>((u & 0x007fffffu) >> 13);
  if (sig == 0) sig = 1;
  return static_cast<std::uint16_t>(((u >> 16) & 0x8000u) | 0x7c00u | sig);
}

inline std::uint16_t f32_to_f16_1(std::uint32_t x) {
  const std::uint32_t sign = x & 0x80000000u;
  const std::uint32_t a = x ^ sign;
  std::uint16_t o;
  if (a > 0x7f800000u) return f32_nan_to_f16(x);
  if (a >= (143u << 23)) {  // |x| >= 65536: infinity (values just below round there too, below)
    o = 0x7c00u;
  } else if (a < (113u << 23)) {
    // subnormal half or zero: adding 0.5 (2^-1) lets the FPU round the 10 kept bits to nearest even
    const std::uint32_t magic = ((127u - 15u) + (23u - 10u) + 1u) << 23;
    o = static_cast<std::uint16_t>(f2u(u2f(a) + u2f(magic)) - magic);
  } else {
    std::uint32_t m = a + ((15u - 127u) << 23) + 0xfffu + ((a >> 13) & 1u);
    o = static_cast<std::uint16_t>(m >> 13);  // a carry into the exponent gives inf: right
  }
  return static_cast<std::uint16_t>(o | (sign >> 16));
}

inline std::uint32_t f16_to_f32_1(std::uint16_t h) {
  const std::uint32_t shifted_exp = 0x7c00u << 13;
  std::uint32_t o = (static_cast<std::uint32_t>(h) & 0x7fffu) << 13;
  const std::uint32_t exp = shifted_exp & o;
  o += (127u - 15u) << 23;
  if (exp == shifted_exp) {
    o += (128u - 16u) << 23;  // inf / NaN (payload kept, as NumPy)
  } else if (exp == 0) {
    o += 1u << 23;  // zero / subnormal: renormalise through the FPU (exact)
    o = f2u(u2f(o) - u2f(113u << 23));
  }
  return o | ((static_cast<std::uint32_t>(h) & 0x8000u) << 16);
}

// bulk loops over [b, e) (defined in lowp.cpp; F16C when available)
void bf16_to_f32_range(const std::uint16_t* src, std::uint32_t* dst, std::int64_t b, std::int64_t e);
void f32_to_bf16_range(const std::uint32_t* src, std::uint16_t* dst, std::int64_t b, std::int64_t e);
void f16_to_f32_range(const std::uint16_t* src, std::uint32_t* dst, std::int64_t b, std::int64_t e);
void f32_to_f16_range(const std::uint32_t* src, std::uint16_t* dst, std::int64_t b, std::int64_t e);

}  // namespace lowp
}  // namespace flow_native
