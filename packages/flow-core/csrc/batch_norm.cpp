// BatchNorm over dim 1 of a C-contiguous (N, C, S) array (S = the flattened
// spatial dims; the Python wrapper reshapes). Work is parallel over channels:
// one channel's N * S elements are N strided rows of S contiguous ones, so
// every thread streams its own rows and no reduction crosses threads.
//
// Forward: per channel, a two-pass mean / variance in double (the second pass
// re-reads rows the first just brought into cache), then one normalise+affine
// pass y = x * scale + shift with per-channel scale/shift, as PyTorch's CPU
// kernel does. Backward: one pass for sum(g) and sum(g * (x - mean)), one for
// dx = g * a + x * b + c (per-channel a, b, c).
#include "common.h"
#include "kernels.h"

namespace flow_native {
namespace {

struct Dims {
  std::int64_t n, c, s;
};

Dims dims_of(const py::array& x, const char* fn) {
  if (x.ndim() != 3) throw py::value_error(std::string(fn) + ": x must have shape (N, C, S)");
  return {static_cast<std::int64_t>(x.shape(0)), static_cast<std::int64_t>(x.shape(1)),
          static_cast<std::int64_t>(x.shape(2))};
}

bool parallel_over(const Dims& d) { return d.c > 1 && d.n * d.c * d.s >= kParallelGrain; }

template <typename T>
const T* opt_ptr(const std::optional<py::array>& a) {
  return a ? cptr<T>(*a) : nullptr;
}

template <typename T>
void bn_forward_impl(const T* FLOW_RESTRICT x, const T* FLOW_RESTRICT w, const T* FLOW_RESTRICT b,
                     const T* mean_in, const T* invstd_in, T* FLOW_RESTRICT y,
                     T* FLOW_RESTRICT mean_out, T* FLOW_RESTRICT invstd_out, Dims d, double eps) {
  MaybeReleaseGil nogil(d.n * d.c * d.s);
  const double m = static_cast<double>(d.n * d.s);
#pragma omp parallel for schedule(static) if (parallel_over(d))
  for (std::int64_t c = 0; c < d.c; ++c) {
    double mu, rs;
    if (mean_in != nullptr) {  // evaluation: the given (running) statistics
      mu = static_cast<double>(mean_in[c]);
      rs = static_cast<double>(invstd_in[c]);
    } else {
      double s = 0.0;
      for (std::int64_t i = 0; i < d.n; ++i) {
        const T* xr = x + (i * d.c + c) * d.s;
        FLOW_SIMD_REDUCE(+, s)
        for (std::int64_t k = 0; k < d.s; ++k) s += static_cast<double>(xr[k]);
      }
      mu = m > 0 ? s / m : 0.0;
      double ss = 0.0;
      for (std::int64_t i = 0; i < d.n; ++i) {
        const T* xr = x + (i * d.c + c) * d.s;
        FLOW_SIMD_REDUCE(+, ss)
        for (std::int64_t k = 0; k < d.s; ++k) {
          const double dv = static_cast<double>(xr[k]) - mu;
          ss += dv * dv;
        }
      }
      rs = 1.0 / std::sqrt((m > 0 ? ss / m : 0.0) + eps);
    }
    mean_out[c] = static_cast<T>(mu);
    invstd_out[c] = static_cast<T>(rs);
    const double sc = rs * (w ? static_cast<double>(w[c]) : 1.0);
    const T scale = static_cast<T>(sc);
    const T shift = static_cast<T>((b ? static_cast<double>(b[c]) : 0.0) - mu * sc);
    for (std::int64_t i = 0; i < d.n; ++i) {
      const T* xr = x + (i * d.c + c) * d.s;
      T* yr = y + (i * d.c + c) * d.s;
      FLOW_SIMD
      for (std::int64_t k = 0; k < d.s; ++k) yr[k] = xr[k] * scale + shift;
    }
  }
}

// dweight = sum(g * xhat), dbias = sum(g); in training
//   dx = w * invstd * (g - mean(g) - xhat * mean(g * xhat)) + gmean / M - ginvstd * invstd^3 * (x - mean) / M
// (the last two terms: cotangents of the saved mean / invstd outputs), in evaluation dx = w * invstd * g.
template <typename T>
void bn_backward_impl(const T* FLOW_RESTRICT g, const T* FLOW_RESTRICT x, const T* FLOW_RESTRICT w,
                      const T* FLOW_RESTRICT mean, const T* FLOW_RESTRICT invstd, const T* gmean,
                      const T* ginvstd, T* FLOW_RESTRICT dx, T* FLOW_RESTRICT dw, T* FLOW_RESTRICT db,
                      Dims d, bool training) {
  MaybeReleaseGil nogil(d.n * d.c * d.s);
  const double m = static_cast<double>(d.n * d.s);
  const double inv_m = m > 0 ? 1.0 / m : 0.0;
#pragma omp parallel for schedule(static) if (parallel_over(d))
  for (std::int64_t c = 0; c < d.c; ++c) {
    const double mu = static_cast<double>(mean[c]);
    const double rs = static_cast<double>(invstd[c]);
    double sg = 0.0, sgx = 0.0;
    for (std::int64_t i = 0; i < d.n; ++i) {
      const T* gr = g + (i * d.c + c) * d.s;
      const T* xr = x + (i * d.c + c) * d.s;
      FLOW_SIMD_REDUCE(+, sg, sgx)
      for (std::int64_t k = 0; k < d.s; ++k) {
        const double gv = static_cast<double>(gr[k]);
        sg += gv;
        sgx += gv * (static_cast<double>(xr[k]) - mu);
      }
    }
    dw[c] = static_cast<T>(sgx * rs);
    db[c] = static_cast<T>(sg);
    const double a = rs * (w ? static_cast<double>(w[c]) : 1.0);
    double bx = 0.0, cc = 0.0;
    if (training) {
      bx = -a * rs * rs * sgx * inv_m;
      cc = -a * sg * inv_m;
      if (gmean) cc += static_cast<double>(gmean[c]) * inv_m;
      if (ginvstd) bx -= static_cast<double>(ginvstd[c]) * rs * rs * rs * inv_m;
      cc -= bx * mu;  // b * (x - mean) = b * x - b * mean
    }
    const T ta = static_cast<T>(a), tb = static_cast<T>(bx), tc = static_cast<T>(cc);
    for (std::int64_t i = 0; i < d.n; ++i) {
      const T* gr = g + (i * d.c + c) * d.s;
      const T* xr = x + (i * d.c + c) * d.s;
      T* dxr = dx + (i * d.c + c) * d.s;
      FLOW_SIMD
      for (std::int64_t k = 0; k < d.s; ++k) dxr[k] = gr[k] * ta + xr[k] * tb + tc;
    }
  }
}

void check_vec(const char* fn, const std::optional<py::array>& p, const py::array& x, std::int64_t c,
               const char* name) {
  if (!p) return;
  get_dtype(*p, fn, name);
  check_same_dtype(*p, x, fn, name, "x");
  check_contiguous(*p, fn, name);
  if (p->ndim() != 1 || p->shape(0) != c) {
    throw py::value_error(std::string(fn) + ": '" + name + "' must have shape (" + std::to_string(c) +
                          ",) (one value per channel of x)");
  }
}

py::tuple batch_norm_forward(const py::array& x, const std::optional<py::array>& weight,
                             const std::optional<py::array>& bias, const std::optional<py::array>& mean,
                             const std::optional<py::array>& invstd, double eps) {
  constexpr const char* fn = "batch_norm_forward";
  const DType dt = get_dtype(x, fn, "x");
  check_contiguous(x, fn, "x");
  const Dims d = dims_of(x, fn);
  check_vec(fn, weight, x, d.c, "weight");
  check_vec(fn, bias, x, d.c, "bias");
  check_vec(fn, mean, x, d.c, "mean");
  check_vec(fn, invstd, x, d.c, "invstd");
  if (mean.has_value() != invstd.has_value())
    throw py::value_error(std::string(fn) + ": give both 'mean' and 'invstd' (evaluation) or neither");
  if (!(eps >= 0.0)) throw py::value_error(std::string(fn) + ": eps must be >= 0");
  auto run = [&](auto tag) {
    using T = decltype(tag);
    py::array y = empty_like_shape<T>(x);
    py::array mo = empty_shape<T>({static_cast<py::ssize_t>(d.c)});
    py::array io = empty_shape<T>({static_cast<py::ssize_t>(d.c)});
    bn_forward_impl<T>(cptr<T>(x), opt_ptr<T>(weight), opt_ptr<T>(bias), opt_ptr<T>(mean), opt_ptr<T>(invstd),
                       mptr<T>(y), mptr<T>(mo), mptr<T>(io), d, eps);
    return py::make_tuple(y, mo, io);
  };
  return dt == DType::F32 ? run(float{}) : run(double{});
}

py::tuple batch_norm_backward(const py::array& g, const py::array& x, const std::optional<py::array>& weight,
                              const py::array& mean, const py::array& invstd,
                              const std::optional<py::array>& grad_mean,
                              const std::optional<py::array>& grad_invstd, bool training) {
  constexpr const char* fn = "batch_norm_backward";
  const DType dt = get_dtype(x, fn, "x");
  get_dtype(g, fn, "grad_out");
  check_same_dtype(g, x, fn, "grad_out", "x");
  check_same_shape(g, x, fn, "grad_out", "x");
  check_contiguous(g, fn, "grad_out");
  check_contiguous(x, fn, "x");
  const Dims d = dims_of(x, fn);
  check_vec(fn, weight, x, d.c, "weight");
  check_vec(fn, mean, x, d.c, "mean");
  check_vec(fn, invstd, x, d.c, "invstd");
  check_vec(fn, grad_mean, x, d.c, "grad_mean");
  check_vec(fn, grad_invstd, x, d.c, "grad_invstd");
  auto run = [&](auto tag) {
    using T = decltype(tag);
    py::array dx = empty_like_shape<T>(x);
    py::array dw = empty_shape<T>({static_cast<py::ssize_t>(d.c)});
    py::array db = empty_shape<T>({static_cast<py::ssize_t>(d.c)});
    bn_backward_impl<T>(cptr<T>(g), cptr<T>(x), opt_ptr<T>(weight), cptr<T>(mean), cptr<T>(invstd),
                        opt_ptr<T>(grad_mean), opt_ptr<T>(grad_invstd), mptr<T>(dx), mptr<T>(dw), mptr<T>(db), d,
                        training);
    return py::make_tuple(dx, dw, db);
  };
  return dt == DType::F32 ? run(float{}) : run(double{});
}

}  // namespace

void register_batch_norm(py::module_& m) {
  m.def("batch_norm_forward", &batch_norm_forward, py::arg("x"), py::arg("weight") = py::none(),
        py::arg("bias") = py::none(), py::arg("mean") = py::none(), py::arg("invstd") = py::none(),
        py::arg("eps") = 1e-5,
        "BatchNorm over dim 1 of x (N, C, S) -> (y, mean, invstd); batch statistics unless mean/invstd are given.");
  m.def("batch_norm_backward", &batch_norm_backward, py::arg("grad_out"), py::arg("x"),
        py::arg("weight"), py::arg("mean"), py::arg("invstd"), py::arg("grad_mean") = py::none(),
        py::arg("grad_invstd") = py::none(), py::arg("training") = true,
        "BatchNorm backward -> (dx, dweight, dbias).");
}

}  // namespace flow_native
