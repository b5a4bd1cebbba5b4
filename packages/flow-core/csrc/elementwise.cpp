// Fused elementwise activations: GELU (exact / tanh approximation) and SiLU.
// Each forward/backward is a single pass over memory with no temporaries.
#include "common.h"
#include "kernels.h"

namespace flow_native {
namespace {

enum class GeluApprox { None, Tanh };

GeluApprox parse_approximate(const char* fn, const std::string& approximate) {
  if (approximate == "none") return GeluApprox::None;
  if (approximate == "tanh") return GeluApprox::Tanh;
  throw py::value_error(std::string(fn) + ": approximate must be 'none' or 'tanh', got '" +
                        approximate + "'");
}

// Constants as in PyTorch's GELU kernels.
template <typename T>
struct GeluConst {
  static constexpr T kSqrt1_2 = static_cast<T>(0.70710678118654752440);      // 1/sqrt(2)
  static constexpr T kInvSqrt2Pi = static_cast<T>(0.39894228040143267794);   // 1/sqrt(2*pi)
  static constexpr T kBeta = static_cast<T>(0.79788456080286535588);         // sqrt(2/pi)
  static constexpr T kKappa = static_cast<T>(0.044715);
};

template <typename T>
inline T gelu_fwd(T x, GeluApprox approx) {
  using C = GeluConst<T>;
  if (approx == GeluApprox::None) {
    return static_cast<T>(0.5) * x * (static_cast<T>(1) + erf_fast(x * C::kSqrt1_2));
  }
  const T inner = C::kBeta * (x + C::kKappa * x * x * x);
  return static_cast<T>(0.5) * x * (static_cast<T>(1) + tanh_fast(inner));
}

template <typename T>
inline T gelu_bwd(T g, T x, GeluApprox approx) {
  using C = GeluConst<T>;
  if (approx == GeluApprox::None) {
    const T cdf = static_cast<T>(0.5) * (static_cast<T>(1) + erf_fast(x * C::kSqrt1_2));
    const T pdf = exp_fast(static_cast<T>(-0.5) * x * x) * C::kInvSqrt2Pi;
    return g * (cdf + x * pdf);
  }
  const T x_sq = x * x;
  const T inner = C::kBeta * (x + C::kKappa * x_sq * x);
  const T t = tanh_fast(inner);
  const T left = static_cast<T>(0.5) * x;
  const T right = static_cast<T>(1) + t;
  const T left_derivative = static_cast<T>(0.5) * right;
  const T right_derivative = static_cast<T>(1) - t * t;
  const T inner_derivative = C::kBeta * (static_cast<T>(1) + static_cast<T>(3) * C::kKappa * x_sq);
  return g * (left_derivative + left * right_derivative * inner_derivative);
}

template <typename T>
inline T sigmoid(T x) {
  return static_cast<T>(1) / (static_cast<T>(1) + exp_fast(-x));
}

// ---- contiguous block kernels (one SIMD loop each) ---------------------

template <typename T>
struct Block {
  static void gelu_fwd_exact(const T* FLOW_RESTRICT x, T* FLOW_RESTRICT y, std::int64_t n) {
    FLOW_SIMD
    for (std::int64_t i = 0; i < n; ++i) y[i] = gelu_fwd(x[i], GeluApprox::None);  // float: erf_fast
  }
  static void gelu_fwd_tanh(const T* FLOW_RESTRICT x, T* FLOW_RESTRICT y, std::int64_t n) {
    FLOW_SIMD
    for (std::int64_t i = 0; i < n; ++i) y[i] = gelu_fwd(x[i], GeluApprox::Tanh);
  }
  static void gelu_bwd_exact(const T* FLOW_RESTRICT g, const T* FLOW_RESTRICT x, T* FLOW_RESTRICT dx,
                             std::int64_t n) {
    FLOW_SIMD
    for (std::int64_t i = 0; i < n; ++i) dx[i] = gelu_bwd(g[i], x[i], GeluApprox::None);
  }
  static void gelu_bwd_tanh(const T* FLOW_RESTRICT g, const T* FLOW_RESTRICT x, T* FLOW_RESTRICT dx,
                            std::int64_t n) {
    FLOW_SIMD
    for (std::int64_t i = 0; i < n; ++i) dx[i] = gelu_bwd(g[i], x[i], GeluApprox::Tanh);
  }
  static void silu_fwd(const T* FLOW_RESTRICT x, T* FLOW_RESTRICT y, std::int64_t n) {
    FLOW_SIMD
    for (std::int64_t i = 0; i < n; ++i) y[i] = x[i] * sigmoid(x[i]);
  }
  // d/dx x*s(x) = s * (1 + x * (1 - s))
  static void silu_bwd(const T* FLOW_RESTRICT g, const T* FLOW_RESTRICT x, T* FLOW_RESTRICT dx,
                       std::int64_t n) {
    FLOW_SIMD
    for (std::int64_t i = 0; i < n; ++i) {
      const T s = sigmoid(x[i]);
      dx[i] = g[i] * s * (static_cast<T>(1) + x[i] * (static_cast<T>(1) - s));
    }
  }
};

// float32: multi-versioned entry points (AVX2/FMA clone on capable x86-64).
FLOW_TARGET_CLONES void gelu_fwd_tanh_f32(const float* x, float* y, std::int64_t n) {
  Block<float>::gelu_fwd_tanh(x, y, n);
}
FLOW_TARGET_CLONES void gelu_bwd_tanh_f32(const float* g, const float* x, float* dx, std::int64_t n) {
  Block<float>::gelu_bwd_tanh(g, x, dx, n);
}
FLOW_TARGET_CLONES void gelu_fwd_exact_f32(const float* x, float* y, std::int64_t n) {
  Block<float>::gelu_fwd_exact(x, y, n);
}
FLOW_TARGET_CLONES void gelu_bwd_exact_f32(const float* g, const float* x, float* dx, std::int64_t n) {
  Block<float>::gelu_bwd_exact(g, x, dx, n);
}
FLOW_TARGET_CLONES void silu_fwd_f32(const float* x, float* y, std::int64_t n) {
  Block<float>::silu_fwd(x, y, n);
}
FLOW_TARGET_CLONES void silu_bwd_f32(const float* g, const float* x, float* dx, std::int64_t n) {
  Block<float>::silu_bwd(g, x, dx, n);
}

template <typename T>
struct Kernels : Block<T> {};

template <>
struct Kernels<float> : Block<float> {
  static void gelu_fwd_exact(const float* x, float* y, std::int64_t n) { gelu_fwd_exact_f32(x, y, n); }
  static void gelu_fwd_tanh(const float* x, float* y, std::int64_t n) { gelu_fwd_tanh_f32(x, y, n); }
  static void gelu_bwd_tanh(const float* g, const float* x, float* dx, std::int64_t n) {
    gelu_bwd_tanh_f32(g, x, dx, n);
  }
  static void gelu_bwd_exact(const float* g, const float* x, float* dx, std::int64_t n) {
    gelu_bwd_exact_f32(g, x, dx, n);
  }
  static void silu_fwd(const float* x, float* y, std::int64_t n) { silu_fwd_f32(x, y, n); }
  static void silu_bwd(const float* g, const float* x, float* dx, std::int64_t n) {
    silu_bwd_f32(g, x, dx, n);
  }
};

// ---- drivers --------------------------------------------------------------

template <typename T>
void gelu_forward_impl(const T* x, T* y, std::int64_t n, GeluApprox approx) {
  MaybeReleaseGil nogil(n);
  parallel_blocks(n, [&](std::int64_t b, std::int64_t len) {
    if (approx == GeluApprox::None) {
      Kernels<T>::gelu_fwd_exact(x + b, y + b, len);
    } else {
      Kernels<T>::gelu_fwd_tanh(x + b, y + b, len);
    }
  });
}

template <typename T>
void gelu_backward_impl(const T* g, const T* x, T* dx, std::int64_t n, GeluApprox approx) {
  MaybeReleaseGil nogil(n);
  parallel_blocks(n, [&](std::int64_t b, std::int64_t len) {
    if (approx == GeluApprox::None) {
      Kernels<T>::gelu_bwd_exact(g + b, x + b, dx + b, len);
    } else {
      Kernels<T>::gelu_bwd_tanh(g + b, x + b, dx + b, len);
    }
  });
}

template <typename T>
void silu_forward_impl(const T* x, T* y, std::int64_t n) {
  MaybeReleaseGil nogil(n);
  parallel_blocks(n, [&](std::int64_t b, std::int64_t len) { Kernels<T>::silu_fwd(x + b, y + b, len); });
}

template <typename T>
void silu_backward_impl(const T* g, const T* x, T* dx, std::int64_t n) {
  MaybeReleaseGil nogil(n);
  parallel_blocks(n, [&](std::int64_t b, std::int64_t len) {
    Kernels<T>::silu_bwd(g + b, x + b, dx + b, len);
  });
}

py::array gelu_forward(const py::array& x, const std::string& approximate) {
  constexpr const char* fn = "gelu_forward";
  const GeluApprox approx = parse_approximate(fn, approximate);
  const DType dt = get_dtype(x, fn, "x");
  check_contiguous(x, fn, "x");
  if (dt == DType::F32) {
    py::array y = empty_like_shape<float>(x);
    gelu_forward_impl<float>(cptr<float>(x), mptr<float>(y), x.size(), approx);
    return y;
  }
  py::array y = empty_like_shape<double>(x);
  gelu_forward_impl<double>(cptr<double>(x), mptr<double>(y), x.size(), approx);
  return y;
}

void check_grad_pair(const char* fn, const py::array& g, const py::array& x) {
  get_dtype(x, fn, "x");
  get_dtype(g, fn, "grad_out");
  check_same_dtype(g, x, fn, "grad_out", "x");
  check_same_shape(g, x, fn, "grad_out", "x");
  check_contiguous(g, fn, "grad_out");
  check_contiguous(x, fn, "x");
}

py::array gelu_backward(const py::array& g, const py::array& x, const std::string& approximate) {
  constexpr const char* fn = "gelu_backward";
  const GeluApprox approx = parse_approximate(fn, approximate);
  check_grad_pair(fn, g, x);
  if (get_dtype(x, fn, "x") == DType::F32) {
    py::array dx = empty_like_shape<float>(x);
    gelu_backward_impl<float>(cptr<float>(g), cptr<float>(x), mptr<float>(dx), x.size(), approx);
    return dx;
  }
  py::array dx = empty_like_shape<double>(x);
  gelu_backward_impl<double>(cptr<double>(g), cptr<double>(x), mptr<double>(dx), x.size(), approx);
  return dx;
}

py::array silu_forward(const py::array& x) {
  constexpr const char* fn = "silu_forward";
  const DType dt = get_dtype(x, fn, "x");
  check_contiguous(x, fn, "x");
  if (dt == DType::F32) {
    py::array y = empty_like_shape<float>(x);
    silu_forward_impl<float>(cptr<float>(x), mptr<float>(y), x.size());
    return y;
  }
  py::array y = empty_like_shape<double>(x);
  silu_forward_impl<double>(cptr<double>(x), mptr<double>(y), x.size());
  return y;
}

py::array silu_backward(const py::array& g, const py::array& x) {
  constexpr const char* fn = "silu_backward";
  check_grad_pair(fn, g, x);
  if (get_dtype(x, fn, "x") == DType::F32) {
    py::array dx = empty_like_shape<float>(x);
    silu_backward_impl<float>(cptr<float>(g), cptr<float>(x), mptr<float>(dx), x.size());
    return dx;
  }
  py::array dx = empty_like_shape<double>(x);
  silu_backward_impl<double>(cptr<double>(g), cptr<double>(x), mptr<double>(dx), x.size());
  return dx;
}

}  // namespace

void register_elementwise(py::module_& m) {
  m.def("gelu_forward", &gelu_forward, py::arg("x"), py::arg("approximate") = "none",
        "GELU; approximate='none' uses erf, 'tanh' the tanh approximation.");
  m.def("gelu_backward", &gelu_backward, py::arg("grad_out"), py::arg("x"),
        py::arg("approximate") = "none", "Gradient of GELU w.r.t. its input.");
  m.def("silu_forward", &silu_forward, py::arg("x"), "SiLU: x * sigmoid(x).");
  m.def("silu_backward", &silu_backward, py::arg("grad_out"), py::arg("x"),
        "Gradient of SiLU w.r.t. its input.");
}

}  // namespace flow_native
