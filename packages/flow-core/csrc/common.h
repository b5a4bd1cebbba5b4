// Shared helpers for the flow-core native CPU kernels (flow._C).
//
// Conventions used by every kernel in this directory:
//  * inputs are C-contiguous float32 / float64 NumPy arrays (the Python
//    wrapper flow.backends.cpu.native makes them contiguous; the checks here
//    are a safety net for direct callers of flow._C);
//  * "row" kernels treat an array of shape (..., N) as M = size / N rows of
//    N contiguous elements and parallelise over rows with OpenMP, with an
//    `if` clause so that small inputs stay single-threaded;
//  * the GIL is released around the numeric work when it is large enough.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>  // std::optional<py::array> arguments (None)

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

namespace py = pybind11;

namespace flow_native {

// Work (in elements) below which kernels run on the calling thread only.
// Spawning / waking an OpenMP team costs a few microseconds, which dominates
// for small tensors.
constexpr std::int64_t kParallelGrain = 32768;
// Work (in elements) below which the GIL is kept (releasing/reacquiring it
// is not free either).
constexpr std::int64_t kReleaseGilGrain = 4096;

#if defined(_MSC_VER)
#define FLOW_RESTRICT __restrict
#else
#define FLOW_RESTRICT __restrict__
#endif

// Hint to vectorise an innermost loop. `omp simd` is honoured with -fopenmp or
// -fopenmp-simd (CMakeLists.txt adds one of them); otherwise it is ignored.
#define FLOW_PRAGMA(...) _Pragma(#__VA_ARGS__)
#if defined(_OPENMP) || defined(FLOW_HAVE_OPENMP_SIMD)
#define FLOW_SIMD FLOW_PRAGMA(omp simd)
// FLOW_SIMD_REDUCE(+, a) or FLOW_SIMD_REDUCE(+, a, b)
#define FLOW_SIMD_REDUCE(op, ...) FLOW_PRAGMA(omp simd reduction(op : __VA_ARGS__))
#else
#define FLOW_SIMD
#define FLOW_SIMD_REDUCE(op, ...)
#endif

// Function multi-versioning for the hottest float32 row kernels: on x86-64
// Linux with GCC, compile an AVX2+FMA clone next to the baseline one and
// pick at load time (ifunc). Results may differ by ~1 ulp between clones.
#if defined(FLOW_ENABLE_MULTIVERSION) && defined(__GNUC__) && !defined(__clang__) && \
    defined(__x86_64__) && defined(__linux__) && defined(__GLIBC__) && (__GNUC__ >= 11)
#define FLOW_TARGET_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define FLOW_TARGET_CLONES
#endif

inline int max_threads() {
#ifdef _OPENMP
  return omp_get_max_threads();
#else
  return 1;
#endif
}

inline int thread_id() {
#ifdef _OPENMP
  return omp_get_thread_num();
#else
  return 0;
#endif
}

// Releases the GIL for the lifetime of the object when `work` is large.
class MaybeReleaseGil {
 public:
  explicit MaybeReleaseGil(std::int64_t work) {
    if (work >= kReleaseGilGrain) release_.emplace();
  }

 private:
  std::optional<py::gil_scoped_release> release_;
};

// ---------------------------------------------------------------------------
// dtype handling

enum class DType { F32, F64 };

inline std::string dtype_name(const py::array& a) {
  return py::str(static_cast<py::object>(a.dtype())).cast<std::string>();
}

inline DType get_dtype(const py::array& a, const char* fn, const char* arg) {
  if (a.dtype().equal(py::dtype::of<float>())) return DType::F32;
  if (a.dtype().equal(py::dtype::of<double>())) return DType::F64;
  throw py::type_error(std::string(fn) + ": unsupported dtype " + dtype_name(a) + " for '" +
                       arg + "' (expected float32 or float64)");
}

inline void check_same_dtype(const py::array& a, const py::array& ref, const char* fn,
                             const char* arg, const char* ref_arg) {
  if (!a.dtype().equal(ref.dtype())) {
    throw py::type_error(std::string(fn) + ": dtype mismatch, '" + arg + "' is " +
                         dtype_name(a) + " but '" + ref_arg + "' is " + dtype_name(ref));
  }
}

inline bool is_c_contiguous(const py::array& a) {
  return (a.flags() & py::array::c_style) != 0;
}

inline void check_contiguous(const py::array& a, const char* fn, const char* arg) {
  if (!is_c_contiguous(a)) {
    throw py::value_error(std::string(fn) + ": '" + arg +
                          "' must be C-contiguous (use np.ascontiguousarray)");
  }
}

// For arrays updated in place: C-contiguous and writable.
inline void check_inplace(const py::array& a, const char* fn, const char* arg) {
  if (!is_c_contiguous(a)) {
    throw py::value_error(std::string(fn) + ": '" + arg +
                          "' is updated in place and must be a C-contiguous array");
  }
  if (!a.writeable()) {
    throw py::value_error(std::string(fn) + ": '" + arg +
                          "' is updated in place and must be writable");
  }
}

inline std::vector<py::ssize_t> shape_of(const py::array& a) {
  return std::vector<py::ssize_t>(a.shape(), a.shape() + a.ndim());
}

inline void check_same_shape(const py::array& a, const py::array& ref, const char* fn,
                             const char* arg, const char* ref_arg) {
  if (shape_of(a) != shape_of(ref)) {
    throw py::value_error(std::string(fn) + ": shape mismatch between '" + arg + "' and '" +
                          ref_arg + "'");
  }
}

inline void check_same_size(const py::array& a, const py::array& ref, const char* fn,
                            const char* arg, const char* ref_arg) {
  if (a.size() != ref.size()) {
    throw py::value_error(std::string(fn) + ": '" + arg + "' has " + std::to_string(a.size()) +
                          " elements but '" + ref_arg + "' has " + std::to_string(ref.size()));
  }
}

// (rows, cols) view of an array reduced over its last axis. 0-d arrays are a
// single row of one element.
struct RowView {
  std::int64_t rows;
  std::int64_t cols;
};

inline RowView row_view(const py::array& a) {
  if (a.ndim() == 0) return {1, 1};
  const std::int64_t cols = a.shape(a.ndim() - 1);
  const std::int64_t size = a.size();
  return {cols == 0 ? 0 : size / cols, cols};
}

template <typename T>
inline const T* cptr(const py::array& a) {
  return static_cast<const T*>(a.data());
}

template <typename T>
inline T* mptr(py::array& a) {
  return static_cast<T*>(a.mutable_data());
}

template <typename T>
inline py::array empty_like_shape(const py::array& a) {
  return py::array_t<T, py::array::c_style>(shape_of(a));
}

template <typename T>
inline py::array empty_shape(const std::vector<py::ssize_t>& shape) {
  return py::array_t<T, py::array::c_style>(shape);
}

// ---------------------------------------------------------------------------
// Vectorisable exp.
//
// float: Cephes-style range reduction + degree-6 polynomial, written without
// branches or library calls so `omp simd` loops vectorise (std::exp does not
// without -ffast-math, which we avoid because it breaks inf/NaN semantics).
// Accurate to ~2 ulp on [-87.33, 88.37]; returns 0 below, +inf above and
// propagates NaN. double: std::exp.

#if defined(__has_builtin)
#if __has_builtin(__builtin_bit_cast)
#define FLOW_HAS_BUILTIN_BIT_CAST 1
#endif
#endif

inline float bits_to_float(std::int32_t i) {
#ifdef FLOW_HAS_BUILTIN_BIT_CAST
  return __builtin_bit_cast(float, i);
#else
  float f;
  std::memcpy(&f, &i, sizeof f);
  return f;
#endif
}

inline std::int32_t float_to_bits(float f) {
#ifdef FLOW_HAS_BUILTIN_BIT_CAST
  return __builtin_bit_cast(std::int32_t, f);
#else
  std::int32_t i;
  std::memcpy(&i, &f, sizeof i);
  return i;
#endif
}

inline float exp_fast(float x) {
  constexpr float kHi = 88.3762626647949f;
  constexpr float kLo = -87.3365447505531f;  // ln(FLT_MIN)
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693359375f;
  constexpr float kLn2Lo = -2.12194440e-4f;
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: round-to-nearest trick

  const bool is_nan = !(x == x);
  float xc = x > kHi ? kHi : x;
  xc = xc < kLo ? kLo : xc;
  xc = is_nan ? 0.0f : xc;

  // n = round(xc / ln2), taken from the mantissa of t.
  const float t = xc * kLog2e + kRound;
  const std::int32_t n = float_to_bits(t) - float_to_bits(kRound);
  const float nf = t - kRound;
  float r = xc - nf * kLn2Hi;
  r = r - nf * kLn2Lo;

  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + r + 1.0f;

  float y = p * bits_to_float((n + 127) << 23);
  y = x > kHi ? std::numeric_limits<float>::infinity() : y;
  y = x < kLo ? 0.0f : y;
  y = is_nan ? x : y;
  return y;
}

inline double exp_fast(double x) { return std::exp(x); }

// Vectorisable tanh. float: odd Taylor polynomial for |u| < 0.125, else
// (1 - e) / (1 + e) with e = exp(-2|u|); max error a few ulp (~4e-7
// relative). double: std::tanh.
inline float tanh_fast(float u) {
  const float a = std::fabs(u);
  const float e = exp_fast(-2.0f * a);
  const float big = (1.0f - e) / (1.0f + e);
  const float a2 = a * a;
  // tanh(a) = a - a^3/3 + 2a^5/15 - 17a^7/315 + O(a^9)
  const float small =
      a + a * a2 * (-0.333333333333f + a2 * (0.133333333333f + a2 * -0.053968253968f));
  const float t = a < 0.125f ? small : big;
  return u < 0.0f ? -t : t;  // NaN propagates through `a`
}

inline double tanh_fast(double u) { return std::tanh(u); }

// Vectorisable erf. float: Abramowitz & Stegun 7.1.26, sign(x) * (1 - t * P(t) * exp(-x^2)) with
// t = 1 / (1 + p |x|): max absolute error 1.5e-7, the formula of PyTorch's vectorised float erf (so
// GELU matches it closely); +-inf give +-1 and NaN propagates. double: std::erf.
inline float erf_fast(float x) {
  const float a = std::fabs(x);
  const float t = 1.0f / (1.0f + 0.3275911f * a);
  float r = 1.061405429f;
  r = r * t - 1.453152027f;
  r = r * t + 1.421413741f;
  r = r * t - 0.284496736f;
  r = r * t + 0.254829592f;
  const float y = 1.0f - r * t * exp_fast(-a * a);
  return x < 0.0f ? -y : y;  // NaN propagates through `a`
}

inline double erf_fast(double x) { return std::erf(x); }

// Elementwise kernels are split into blocks: OpenMP distributes blocks over
// threads, and each block runs a (possibly multi-versioned) SIMD loop.
constexpr std::int64_t kBlock = 8192;

template <typename F>
inline void parallel_blocks(std::int64_t n, F&& f) {
  const std::int64_t nblocks = (n + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (nblocks > 1 && n >= kParallelGrain)
  for (std::int64_t blk = 0; blk < nblocks; ++blk) {
    const std::int64_t begin = blk * kBlock;
    const std::int64_t end = std::min(n, begin + kBlock);
    f(begin, end - begin);
  }
}

}  // namespace flow_native
