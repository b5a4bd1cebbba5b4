// softmax / log_softmax over the last axis, forward and backward.
#include <algorithm>

#include "common.h"
#include "kernels.h"

namespace flow_native {
namespace {

// ---- row kernels ----------------------------------------------------------

template <typename T>
inline T row_max(const T* FLOW_RESTRICT x, std::int64_t n) {
  T m = -std::numeric_limits<T>::infinity();
  FLOW_SIMD_REDUCE(max, m)
  for (std::int64_t i = 0; i < n; ++i) m = x[i] > m ? x[i] : m;
  return m;
}

template <typename T>
inline void softmax_row(const T* FLOW_RESTRICT x, T* FLOW_RESTRICT y, std::int64_t n) {
  const T m = row_max(x, n);
  double s = 0.0;
  FLOW_SIMD_REDUCE(+, s)
  for (std::int64_t i = 0; i < n; ++i) {
    const T e = exp_fast(static_cast<T>(x[i] - m));
    y[i] = e;
    s += static_cast<double>(e);
  }
  const T inv = static_cast<T>(1.0 / s);
  FLOW_SIMD
  for (std::int64_t i = 0; i < n; ++i) y[i] *= inv;
}

template <typename T>
inline void log_softmax_row(const T* FLOW_RESTRICT x, T* FLOW_RESTRICT y, std::int64_t n) {
  const T m = row_max(x, n);
  double s = 0.0;
  FLOW_SIMD_REDUCE(+, s)
  for (std::int64_t i = 0; i < n; ++i) s += static_cast<double>(exp_fast(static_cast<T>(x[i] - m)));
  // (x - max) - log(sum(exp(x - max))): subtracting the max first keeps the
  // result accurate when |x| is large.
  const T lse = static_cast<T>(std::log(s));
  FLOW_SIMD
  for (std::int64_t i = 0; i < n; ++i) y[i] = (x[i] - m) - lse;
}

// dx = out * (g - sum(g * out))
template <typename T>
inline void softmax_backward_row(const T* FLOW_RESTRICT g, const T* FLOW_RESTRICT out,
                                 T* FLOW_RESTRICT dx, std::int64_t n) {
  double dot = 0.0;
  FLOW_SIMD_REDUCE(+, dot)
  for (std::int64_t i = 0; i < n; ++i) dot += static_cast<double>(g[i]) * static_cast<double>(out[i]);
  const T d = static_cast<T>(dot);
  FLOW_SIMD
  for (std::int64_t i = 0; i < n; ++i) dx[i] = out[i] * (g[i] - d);
}

// dx = g - exp(out) * sum(g)
template <typename T>
inline void log_softmax_backward_row(const T* FLOW_RESTRICT g, const T* FLOW_RESTRICT out,
                                     T* FLOW_RESTRICT dx, std::int64_t n) {
  double s = 0.0;
  FLOW_SIMD_REDUCE(+, s)
  for (std::int64_t i = 0; i < n; ++i) s += static_cast<double>(g[i]);
  const T st = static_cast<T>(s);
  FLOW_SIMD
  for (std::int64_t i = 0; i < n; ++i) dx[i] = g[i] - exp_fast(out[i]) * st;
}

// Multi-versioned float32 entry points for the exp-heavy rows (see
// FLOW_TARGET_CLONES in common.h); float64 uses the templates directly.
FLOW_TARGET_CLONES void softmax_row_f32(const float* x, float* y, std::int64_t n) {
  softmax_row<float>(x, y, n);
}
FLOW_TARGET_CLONES void log_softmax_row_f32(const float* x, float* y, std::int64_t n) {
  log_softmax_row<float>(x, y, n);
}
FLOW_TARGET_CLONES void log_softmax_backward_row_f32(const float* g, const float* out, float* dx,
                                                     std::int64_t n) {
  log_softmax_backward_row<float>(g, out, dx, n);
}

template <typename T>
struct Rows {
  static void softmax(const T* x, T* y, std::int64_t n) { softmax_row<T>(x, y, n); }
  static void log_softmax(const T* x, T* y, std::int64_t n) { log_softmax_row<T>(x, y, n); }
  static void log_softmax_backward(const T* g, const T* o, T* dx, std::int64_t n) {
    log_softmax_backward_row<T>(g, o, dx, n);
  }
};

template <>
struct Rows<float> {
  static void softmax(const float* x, float* y, std::int64_t n) { softmax_row_f32(x, y, n); }
  static void log_softmax(const float* x, float* y, std::int64_t n) {
    log_softmax_row_f32(x, y, n);
  }
  static void log_softmax_backward(const float* g, const float* o, float* dx, std::int64_t n) {
    log_softmax_backward_row_f32(g, o, dx, n);
  }
};

// ---- drivers --------------------------------------------------------------

enum class FwdKind { Softmax, LogSoftmax };
enum class BwdKind { Softmax, LogSoftmax };

template <typename T>
void forward_impl(FwdKind kind, const py::array& x, py::array& y) {
  const RowView v = row_view(x);
  const T* xp = cptr<T>(x);
  T* yp = mptr<T>(y);
  const std::int64_t rows = v.rows, cols = v.cols;
  MaybeReleaseGil nogil(rows * cols);
#pragma omp parallel for schedule(static) if (rows > 1 && rows * cols >= kParallelGrain)
  for (std::int64_t r = 0; r < rows; ++r) {
    if (kind == FwdKind::Softmax) {
      Rows<T>::softmax(xp + r * cols, yp + r * cols, cols);
    } else {
      Rows<T>::log_softmax(xp + r * cols, yp + r * cols, cols);
    }
  }
}

template <typename T>
void backward_impl(BwdKind kind, const py::array& g, const py::array& out, py::array& dx) {
  const RowView v = row_view(out);
  const T* gp = cptr<T>(g);
  const T* op = cptr<T>(out);
  T* dp = mptr<T>(dx);
  const std::int64_t rows = v.rows, cols = v.cols;
  MaybeReleaseGil nogil(rows * cols);
#pragma omp parallel for schedule(static) if (rows > 1 && rows * cols >= kParallelGrain)
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::int64_t off = r * cols;
    if (kind == BwdKind::Softmax) {
      softmax_backward_row<T>(gp + off, op + off, dp + off, cols);
    } else {
      Rows<T>::log_softmax_backward(gp + off, op + off, dp + off, cols);
    }
  }
}

py::array forward(const char* fn, FwdKind kind, const py::array& x) {
  const DType dt = get_dtype(x, fn, "x");
  check_contiguous(x, fn, "x");
  if (dt == DType::F32) {
    py::array y = empty_like_shape<float>(x);
    forward_impl<float>(kind, x, y);
    return y;
  }
  py::array y = empty_like_shape<double>(x);
  forward_impl<double>(kind, x, y);
  return y;
}

py::array backward(const char* fn, BwdKind kind, const py::array& g, const py::array& out) {
  const DType dt = get_dtype(out, fn, "out");
  get_dtype(g, fn, "grad_out");
  check_same_dtype(g, out, fn, "grad_out", "out");
  check_same_shape(g, out, fn, "grad_out", "out");
  check_contiguous(g, fn, "grad_out");
  check_contiguous(out, fn, "out");
  if (dt == DType::F32) {
    py::array dx = empty_like_shape<float>(out);
    backward_impl<float>(kind, g, out, dx);
    return dx;
  }
  py::array dx = empty_like_shape<double>(out);
  backward_impl<double>(kind, g, out, dx);
  return dx;
}

}  // namespace

void register_softmax(py::module_& m) {
  m.def(
      "softmax_forward",
      [](const py::array& x) { return forward("softmax_forward", FwdKind::Softmax, x); },
      py::arg("x"), "Numerically stable softmax over the last axis.");
  m.def(
      "softmax_backward",
      [](const py::array& g, const py::array& out) {
        return backward("softmax_backward", BwdKind::Softmax, g, out);
      },
      py::arg("grad_out"), py::arg("out"), "out * (grad_out - sum(grad_out * out, -1)).");
  m.def(
      "log_softmax_forward",
      [](const py::array& x) { return forward("log_softmax_forward", FwdKind::LogSoftmax, x); },
      py::arg("x"), "Numerically stable log_softmax over the last axis.");
  m.def(
      "log_softmax_backward",
      [](const py::array& g, const py::array& out) {
        return backward("log_softmax_backward", BwdKind::LogSoftmax, g, out);
      },
      py::arg("grad_out"), py::arg("out"), "grad_out - exp(out) * sum(grad_out, -1).");
}

}  // namespace flow_native
