// LayerNorm over the last axis. Statistics are computed per row with a
// two-pass algorithm in double precision; mean / rstd are returned in the
// input dtype with shape x.shape[:-1].
#include <algorithm>

#include "common.h"
#include "kernels.h"

namespace flow_native {
namespace {

template <typename T>
void layer_norm_forward_impl(const T* FLOW_RESTRICT x, const T* FLOW_RESTRICT w,
                             const T* FLOW_RESTRICT b, T* FLOW_RESTRICT y, T* FLOW_RESTRICT mean,
                             T* FLOW_RESTRICT rstd, std::int64_t rows, std::int64_t cols,
                             double eps) {
  MaybeReleaseGil nogil(rows * cols);
#pragma omp parallel for schedule(static) if (rows > 1 && rows * cols >= kParallelGrain)
  for (std::int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * cols;
    T* yr = y + r * cols;
    double s = 0.0;
    FLOW_SIMD_REDUCE(+, s)
    for (std::int64_t i = 0; i < cols; ++i) s += static_cast<double>(xr[i]);
    const double mu = s / static_cast<double>(cols);
    double ss = 0.0;
    FLOW_SIMD_REDUCE(+, ss)
    for (std::int64_t i = 0; i < cols; ++i) {
      const double d = static_cast<double>(xr[i]) - mu;
      ss += d * d;
    }
    const double var = ss / static_cast<double>(cols);
    const double rs = 1.0 / std::sqrt(var + eps);
    mean[r] = static_cast<T>(mu);
    rstd[r] = static_cast<T>(rs);
    // Normalise in double: rounding the mean to T first would lose accuracy
    // when |mean| >> std (e.g. float32 data around 1e4 with std 1e-2).
    if (w != nullptr && b != nullptr) {
      FLOW_SIMD
      for (std::int64_t i = 0; i < cols; ++i)
        yr[i] = static_cast<T>((static_cast<double>(xr[i]) - mu) * rs) * w[i] + b[i];
    } else if (w != nullptr) {
      FLOW_SIMD
      for (std::int64_t i = 0; i < cols; ++i)
        yr[i] = static_cast<T>((static_cast<double>(xr[i]) - mu) * rs) * w[i];
    } else if (b != nullptr) {
      FLOW_SIMD
      for (std::int64_t i = 0; i < cols; ++i)
        yr[i] = static_cast<T>((static_cast<double>(xr[i]) - mu) * rs) + b[i];
    } else {
      FLOW_SIMD
      for (std::int64_t i = 0; i < cols; ++i)
        yr[i] = static_cast<T>((static_cast<double>(xr[i]) - mu) * rs);
    }
  }
}

// dx = rstd * (wg - mean(wg) - xhat * mean(wg * xhat)),  wg = g * w
// dweight = sum_rows(g * xhat), dbias = sum_rows(g)
template <typename T>
void layer_norm_backward_impl(const T* FLOW_RESTRICT g, const T* FLOW_RESTRICT x,
                              const T* FLOW_RESTRICT mean, const T* FLOW_RESTRICT rstd,
                              const T* FLOW_RESTRICT w, T* FLOW_RESTRICT dx,
                              T* FLOW_RESTRICT dw, T* FLOW_RESTRICT db, std::int64_t rows,
                              std::int64_t cols) {
  MaybeReleaseGil nogil(rows * cols);
  const bool parallel = rows > 1 && rows * cols >= kParallelGrain;
  const int nthreads = parallel ? max_threads() : 1;
  // Per-thread column partial sums for dweight / dbias (double), reduced at
  // the end in a fixed order so results are deterministic for a given
  // thread count.
  std::vector<double> part_w(dw ? static_cast<std::size_t>(nthreads) * cols : 0, 0.0);
  std::vector<double> part_b(db ? static_cast<std::size_t>(nthreads) * cols : 0, 0.0);
  const double inv_n = cols > 0 ? 1.0 / static_cast<double>(cols) : 0.0;

#pragma omp parallel num_threads(nthreads) if (parallel)
  {
    const int tid = thread_id();
    double* pw = dw ? part_w.data() + static_cast<std::size_t>(tid) * cols : nullptr;
    double* pb = db ? part_b.data() + static_cast<std::size_t>(tid) * cols : nullptr;
#pragma omp for schedule(static)
    for (std::int64_t r = 0; r < rows; ++r) {
      const T* gr = g + r * cols;
      const T* xr = x + r * cols;
      T* dxr = dx + r * cols;
      const double mu = static_cast<double>(mean[r]);
      const double rs = static_cast<double>(rstd[r]);
      double sum_wg = 0.0, sum_wg_xhat = 0.0;
      FLOW_SIMD_REDUCE(+, sum_wg, sum_wg_xhat)
      for (std::int64_t i = 0; i < cols; ++i) {
        const double xhat = (static_cast<double>(xr[i]) - mu) * rs;
        const double wg = static_cast<double>(gr[i]) * (w ? static_cast<double>(w[i]) : 1.0);
        sum_wg += wg;
        sum_wg_xhat += wg * xhat;
      }
      const double a = sum_wg * inv_n;
      const double c = sum_wg_xhat * inv_n;
      FLOW_SIMD
      for (std::int64_t i = 0; i < cols; ++i) {
        const double xhat = (static_cast<double>(xr[i]) - mu) * rs;
        const double wg = static_cast<double>(gr[i]) * (w ? static_cast<double>(w[i]) : 1.0);
        dxr[i] = static_cast<T>(rs * (wg - a - xhat * c));
      }
      if (pw) {
        FLOW_SIMD
        for (std::int64_t i = 0; i < cols; ++i)
          pw[i] += static_cast<double>(gr[i]) * ((static_cast<double>(xr[i]) - mu) * rs);
      }
      if (pb) {
        FLOW_SIMD
        for (std::int64_t i = 0; i < cols; ++i) pb[i] += static_cast<double>(gr[i]);
      }
    }
  }
  for (std::int64_t i = 0; i < cols; ++i) {
    double sw = 0.0, sb = 0.0;
    for (int t = 0; t < nthreads; ++t) {
      if (dw) sw += part_w[static_cast<std::size_t>(t) * cols + i];
      if (db) sb += part_b[static_cast<std::size_t>(t) * cols + i];
    }
    if (dw) dw[i] = static_cast<T>(sw);
    if (db) db[i] = static_cast<T>(sb);
  }
}

void check_param(const char* fn, const std::optional<py::array>& p, const py::array& x,
                 std::int64_t cols, const char* name) {
  if (!p) return;
  get_dtype(*p, fn, name);
  check_same_dtype(*p, x, fn, name, "x");
  check_contiguous(*p, fn, name);
  if (p->ndim() != 1 || p->shape(0) != cols) {
    throw py::value_error(std::string(fn) + ": '" + name + "' must have shape (" +
                          std::to_string(cols) + ",) to match the last axis of x");
  }
}

std::vector<py::ssize_t> stats_shape(const py::array& x) {
  if (x.ndim() == 0) return {};
  return std::vector<py::ssize_t>(x.shape(), x.shape() + x.ndim() - 1);
}

template <typename T>
const T* opt_ptr(const std::optional<py::array>& a) {
  return a ? cptr<T>(*a) : nullptr;
}

py::tuple layer_norm_forward(const py::array& x, const std::optional<py::array>& weight,
                             const std::optional<py::array>& bias, double eps) {
  constexpr const char* fn = "layer_norm_forward";
  const DType dt = get_dtype(x, fn, "x");
  check_contiguous(x, fn, "x");
  if (x.ndim() == 0) throw py::value_error(std::string(fn) + ": x must have at least 1 dimension");
  const RowView v = row_view(x);
  check_param(fn, weight, x, v.cols, "weight");
  check_param(fn, bias, x, v.cols, "bias");
  if (!(eps >= 0.0)) throw py::value_error(std::string(fn) + ": eps must be >= 0");
  auto run = [&](auto tag) {
    using T = decltype(tag);
    py::array y = empty_like_shape<T>(x);
    py::array mean = empty_shape<T>(stats_shape(x));
    py::array rstd = empty_shape<T>(stats_shape(x));
    layer_norm_forward_impl<T>(cptr<T>(x), opt_ptr<T>(weight), opt_ptr<T>(bias), mptr<T>(y),
                               mptr<T>(mean), mptr<T>(rstd), v.rows, v.cols, eps);
    return py::make_tuple(y, mean, rstd);
  };
  return dt == DType::F32 ? run(float{}) : run(double{});
}

py::tuple layer_norm_backward(const py::array& g, const py::array& x, const py::array& mean,
                              const py::array& rstd, const std::optional<py::array>& weight,
                              bool need_weight_grad, bool need_bias_grad) {
  constexpr const char* fn = "layer_norm_backward";
  const DType dt = get_dtype(x, fn, "x");
  get_dtype(g, fn, "grad_out");
  check_same_dtype(g, x, fn, "grad_out", "x");
  check_same_shape(g, x, fn, "grad_out", "x");
  check_contiguous(g, fn, "grad_out");
  check_contiguous(x, fn, "x");
  if (x.ndim() == 0) throw py::value_error(std::string(fn) + ": x must have at least 1 dimension");
  const RowView v = row_view(x);
  auto check_stat = [&](const py::array& arr, const char* name) {
    get_dtype(arr, fn, name);
    check_same_dtype(arr, x, fn, name, "x");
    check_contiguous(arr, fn, name);
    if (arr.size() != v.rows) {
      throw py::value_error(std::string(fn) + ": '" + name + "' must have " +
                            std::to_string(v.rows) + " elements (one per row of x)");
    }
  };
  check_stat(mean, "mean");
  check_stat(rstd, "rstd");
  check_param(fn, weight, x, v.cols, "weight");
  auto run = [&](auto tag) {
    using T = decltype(tag);
    py::array dx = empty_like_shape<T>(x);
    py::object dw = py::none(), db = py::none();
    T* dwp = nullptr;
    T* dbp = nullptr;
    if (need_weight_grad) {
      py::array a = empty_shape<T>({static_cast<py::ssize_t>(v.cols)});
      dwp = mptr<T>(a);
      dw = a;
    }
    if (need_bias_grad) {
      py::array a = empty_shape<T>({static_cast<py::ssize_t>(v.cols)});
      dbp = mptr<T>(a);
      db = a;
    }
    layer_norm_backward_impl<T>(cptr<T>(g), cptr<T>(x), cptr<T>(mean), cptr<T>(rstd),
                                opt_ptr<T>(weight), mptr<T>(dx), dwp, dbp, v.rows, v.cols);
    return py::make_tuple(dx, dw, db);
  };
  return dt == DType::F32 ? run(float{}) : run(double{});
}

}  // namespace

void register_layer_norm(py::module_& m) {
  m.def("layer_norm_forward", &layer_norm_forward, py::arg("x"), py::arg("weight") = py::none(),
        py::arg("bias") = py::none(), py::arg("eps") = 1e-5,
        "LayerNorm over the last axis -> (y, mean, rstd); mean/rstd have shape x.shape[:-1].");
  m.def("layer_norm_backward", &layer_norm_backward, py::arg("grad_out"), py::arg("x"),
        py::arg("mean"), py::arg("rstd"), py::arg("weight") = py::none(),
        py::arg("need_weight_grad") = true, py::arg("need_bias_grad") = true,
        "LayerNorm backward -> (dx, dweight or None, dbias or None).");
}

}  // namespace flow_native
