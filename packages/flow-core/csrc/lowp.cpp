// Low-precision conversions: bfloat16 <-> float32 and float16 <-> float32.
//
// NumPy has no fast float16 / bfloat16 arithmetic, so the CPU runs these dtypes through float32
// kernels (flow.backends.cpu.lowp) and the conversions in and out are on every such op's path.
// Results are bit-exact with the references the tests compare against:
//  * float32 -> bfloat16 as ml_dtypes' astype: round to nearest even, subnormals kept, a NaN
//    becomes the quiet NaN 0x7fc0 with its sign;
//  * bfloat16 -> float32: the 16 bits shifted up (exact, NaN payloads kept);
//  * float32 <-> float16 as NumPy's astype: round to nearest even, and a NaN keeps the top bits of
//    its payload (a signalling NaN stays signalling; a payload that would vanish becomes 1).
// float16 uses the F16C instructions (8 values per instruction) when the CPU has them, checked
// once at run time; NaN lanes, where F16C quiets signalling NaNs, are redone in scalar code.
//
// Arrays are passed as raw 16-bit (uint16) and float32 buffers: the Python side views bfloat16 /
// float16 arrays as uint16 and makes them C-contiguous.
#include "common.h"
#include "lowp_convert.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define FLOW_HAVE_X86 1
#endif

namespace flow_native {

namespace lowp {

// ---------------------------------------------------------------------------
// bulk loops over [begin, end) (declared in lowp_convert.h)

FLOW_TARGET_CLONES
void bf16_to_f32_range(const std::uint16_t* FLOW_RESTRICT src, std::uint32_t* FLOW_RESTRICT dst, std::int64_t b,
                       std::int64_t e) {
  FLOW_SIMD
  for (std::int64_t i = b; i < e; ++i) dst[i] = static_cast<std::uint32_t>(src[i]) << 16;
}

FLOW_TARGET_CLONES
void f32_to_bf16_range(const std::uint32_t* FLOW_RESTRICT src, std::uint16_t* FLOW_RESTRICT dst, std::int64_t b,
                       std::int64_t e) {
  FLOW_SIMD
  for (std::int64_t i = b; i < e; ++i) dst[i] = f32_to_bf16_1(src[i]);
}

namespace {

bool g_force_scalar = false;  // tests switch F16C off to check the scalar path on the same machine

#ifdef FLOW_HAVE_X86
bool cpu_has_f16c() {
  static const bool has = __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx");
  return has;
}

__attribute__((target("avx,f16c"))) void f32_to_f16_f16c(const std::uint32_t* src, std::uint16_t* dst,
                                                           std::int64_t b, std::int64_t e) {
  std::int64_t i = b;
  for (; i + 8 <= e; i += 8) {
    const __m256 v = _mm256_castsi256_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i)));
    const __m128i h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), h);
    const int nan = _mm256_movemask_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    if (nan) {
      for (int k = 0; k < 8; ++k)
        if (nan & (1 << k)) dst[i + k] = f32_nan_to_f16(src[i + k]);
    }
  }
  for (; i < e; ++i) dst[i] = f32_to_f16_1(src[i]);
}

__attribute__((target("avx,f16c"))) void f16_to_f32_f16c(const std::uint16_t* src, std::uint32_t* dst,
                                                           std::int64_t b, std::int64_t e) {
  std::int64_t i = b;
  const __m128i exp_mask = _mm_set1_epi16(0x7c00);
  for (; i + 8 <= e; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    _mm256_storeu_ps(reinterpret_cast<float*>(dst + i), _mm256_cvtph_ps(h));
    // inf/NaN lanes (exponent all ones): F16C quiets signalling NaNs, NumPy keeps them
    const __m128i special = _mm_cmpeq_epi16(_mm_and_si128(h, exp_mask), exp_mask);
    if (_mm_movemask_epi8(special)) {
      for (int k = 0; k < 8; ++k)
        if ((src[i + k] & 0x7c00u) == 0x7c00u) dst[i + k] = f16_to_f32_1(src[i + k]);
    }
  }
  for (; i < e; ++i) dst[i] = f16_to_f32_1(src[i]);
}
#endif

}  // namespace

void f32_to_f16_range(const std::uint32_t* src, std::uint16_t* dst, std::int64_t b, std::int64_t e) {
#ifdef FLOW_HAVE_X86
  if (!g_force_scalar && cpu_has_f16c()) return f32_to_f16_f16c(src, dst, b, e);
#endif
  for (std::int64_t i = b; i < e; ++i) dst[i] = f32_to_f16_1(src[i]);
}

void f16_to_f32_range(const std::uint16_t* src, std::uint32_t* dst, std::int64_t b, std::int64_t e) {
#ifdef FLOW_HAVE_X86
  if (!g_force_scalar && cpu_has_f16c()) return f16_to_f32_f16c(src, dst, b, e);
#endif
  for (std::int64_t i = b; i < e; ++i) dst[i] = f16_to_f32_1(src[i]);
}

}  // namespace lowp

namespace {

using namespace lowp;

// ---------------------------------------------------------------------------
// array plumbing

// Conversions are memory-bound: split large arrays into equal contiguous chunks, one per thread.
template <typename Src, typename Dst, typename Fn>
void run_chunked(const Src* src, Dst* dst, std::int64_t n, Fn fn) {
  MaybeReleaseGil nogil(n);
  if (n < 4 * kParallelGrain || max_threads() == 1) {
    fn(src, dst, 0, n);
    return;
  }
#ifdef _OPENMP
#pragma omp parallel
  {
    const std::int64_t nt = omp_get_num_threads(), t = omp_get_thread_num();
    const std::int64_t per = ((n + nt - 1) / nt + 15) / 16 * 16;  // 32-byte aligned chunk starts
    const std::int64_t b = std::min(n, t * per), e = std::min(n, b + per);
    if (b < e) fn(src, dst, b, e);
  }
#else
  fn(src, dst, 0, n);
#endif
}

void check_buffer(const py::array& a, std::size_t itemsize, const char* fn, const char* arg) {
  if (static_cast<std::size_t>(a.itemsize()) != itemsize || !(a.flags() & py::array::c_style)) {
    throw py::type_error(std::string(fn) + ": '" + arg + "' must be a C-contiguous array of " +
                         std::to_string(itemsize * 8) + "-bit items, got dtype " + dtype_name(a));
  }
}

// `out` (optional) receives the result and must have the source's size and the target itemsize.
template <typename Src, typename Dst, typename Fn>
py::array convert(const py::array& src, std::optional<py::array> out, const py::dtype& out_dtype, const char* name,
                  Fn fn) {
  check_buffer(src, sizeof(Src), name, "src");
  std::vector<py::ssize_t> shape(src.shape(), src.shape() + src.ndim());
  py::array dst;
  if (out) {
    dst = *out;
    check_buffer(dst, sizeof(Dst), name, "out");
    if (dst.size() != src.size()) throw py::value_error(std::string(name) + ": 'out' has the wrong size");
    if (!dst.writeable()) throw py::value_error(std::string(name) + ": 'out' must be writable");
  } else {
    dst = py::array(out_dtype, shape);
  }
  const Src* s = static_cast<const Src*>(src.data());
  Dst* d = static_cast<Dst*>(dst.mutable_data());
  run_chunked(s, d, static_cast<std::int64_t>(src.size()), fn);
  return dst;
}

}  // namespace

void register_lowp(py::module_& m) {
  const auto u16 = py::dtype::of<std::uint16_t>();
  const auto f32 = py::dtype::of<float>();
  m.def(
      "bf16_to_f32",
      [f32](const py::array& src, std::optional<py::array> out) {
        return convert<std::uint16_t, std::uint32_t>(src, out, f32, "bf16_to_f32", bf16_to_f32_range);
      },
      py::arg("src"), py::arg("out") = py::none(), "bfloat16 bits (uint16) -> float32 (exact).");
  m.def(
      "f32_to_bf16",
      [u16](const py::array& src, std::optional<py::array> out) {
        return convert<std::uint32_t, std::uint16_t>(src, out, u16, "f32_to_bf16", f32_to_bf16_range);
      },
      py::arg("src"), py::arg("out") = py::none(), "float32 -> bfloat16 bits (uint16), round to nearest even.");
  m.def(
      "f16_to_f32",
      [f32](const py::array& src, std::optional<py::array> out) {
        return convert<std::uint16_t, std::uint32_t>(src, out, f32, "f16_to_f32", f16_to_f32_range);
      },
      py::arg("src"), py::arg("out") = py::none(), "float16 bits (uint16) -> float32 (exact).");
  m.def(
      "f32_to_f16",
      [u16](const py::array& src, std::optional<py::array> out) {
        return convert<std::uint32_t, std::uint16_t>(src, out, u16, "f32_to_f16", f32_to_f16_range);
      },
      py::arg("src"), py::arg("out") = py::none(), "float32 -> float16 bits (uint16), round to nearest even.");
  m.def(
      "lowp_has_f16c",
      []() {
#ifdef FLOW_HAVE_X86
        return cpu_has_f16c() && !g_force_scalar;
#else
        return false;
#endif
      },
      "Whether float16 conversions use the F16C instructions.");
  m.def(
      "_lowp_force_scalar", [](bool on) { g_force_scalar = on; }, py::arg("on"),
      "Testing only: run the float16 conversions without F16C.");
}

}  // namespace flow_native
