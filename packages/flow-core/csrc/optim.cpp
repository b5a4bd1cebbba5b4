// Fused optimizer updates, in place, over float32/float64 arrays.
// The formulas and order of operations follow torch.optim.SGD / Adam / AdamW
// (single-tensor implementation): scalars are computed in double and cast to
// the buffer dtype, element math is done in the buffer dtype.
//
// Two forms: `*_update` takes one parameter array and its state arrays;
// `*_update_multi` takes a list of parameter arrays (each in its own memory,
// so that every view of a parameter sees the update) with their gradients and
// one flat buffer per state, laid out as the parameters one after the other.
// The multi form walks the list in one call, tensor after tensor (so
// parameters that share memory are updated in order, as one call per
// parameter would), each large tensor split over the OpenMP threads.
#include "common.h"
#include "kernels.h"

namespace flow_native {
namespace {

// Maximize (ascend: the gradient negated) is a template parameter so that the common loop is
// exactly the plain one; a runtime sign factor made the memory-bound loop ~20% slower.
template <typename T, bool Maximize>
void sgd_loop(T* FLOW_RESTRICT p, const T* FLOW_RESTRICT g, T* FLOW_RESTRICT buf, std::int64_t n,
              double lr, double momentum, double dampening, bool nesterov, double weight_decay,
              bool first_step) {
  const T wd = static_cast<T>(weight_decay);
  const T mom = static_cast<T>(momentum);
  const T one_minus_damp = static_cast<T>(1.0 - dampening);
  const T neg_lr = static_cast<T>(-lr);
  const bool use_wd = weight_decay != 0.0;
  const bool use_mom = momentum != 0.0;
#pragma omp parallel for simd schedule(static) if (n >= kParallelGrain)
  for (std::int64_t i = 0; i < n; ++i) {
    T d = Maximize ? -g[i] : g[i];
    if (use_wd) d = d + wd * p[i];
    if (use_mom) {
      const T b = first_step ? d : buf[i] * mom + one_minus_damp * d;
      buf[i] = b;
      d = nesterov ? d + mom * b : b;
    }
    p[i] = p[i] + neg_lr * d;
  }
}

template <typename T>
void sgd_impl(T* p, const T* g, T* buf, std::int64_t n, double lr, double momentum,
              double dampening, bool nesterov, double weight_decay, bool first_step,
              bool maximize) {
  if (maximize) {
    sgd_loop<T, true>(p, g, buf, n, lr, momentum, dampening, nesterov, weight_decay, first_step);
  } else {
    sgd_loop<T, false>(p, g, buf, n, lr, momentum, dampening, nesterov, weight_decay, first_step);
  }
}

// torch.lerp's formulation (more accurate for weights near 1).
template <typename T>
inline T lerp(T self, T end, T weight) {
  return std::abs(weight) < static_cast<T>(0.5) ? self + weight * (end - self)
                                                : end - (end - self) * (static_cast<T>(1) - weight);
}

template <typename T, bool Maximize>
void adam_loop(T* FLOW_RESTRICT p, const T* FLOW_RESTRICT g, T* FLOW_RESTRICT m,
               T* FLOW_RESTRICT v, T* FLOW_RESTRICT vmax, std::int64_t n, std::int64_t step,
               double lr, double beta1, double beta2, double eps, double weight_decay,
               bool decoupled, bool amsgrad) {
  const double bias_correction1 = 1.0 - std::pow(beta1, static_cast<double>(step));
  const double bias_correction2 = 1.0 - std::pow(beta2, static_cast<double>(step));
  const T neg_step_size = static_cast<T>(-(lr / bias_correction1));
  const T bc2_sqrt = static_cast<T>(std::sqrt(bias_correction2));
  const T w1 = static_cast<T>(1.0 - beta1);
  const T b2 = static_cast<T>(beta2);
  const T one_minus_b2 = static_cast<T>(1.0 - beta2);
  const T e = static_cast<T>(eps);
  const T wd = static_cast<T>(weight_decay);
  const T decay = static_cast<T>(1.0 - lr * weight_decay);
  const bool use_wd = weight_decay != 0.0;
#pragma omp parallel for simd schedule(static) if (n >= kParallelGrain)
  for (std::int64_t i = 0; i < n; ++i) {
    T pi = p[i];
    T gi = Maximize ? -g[i] : g[i];
    if (use_wd) {
      if (decoupled) {
        pi = pi * decay;
      } else {
        gi = gi + wd * pi;
      }
    }
    const T mi = lerp(m[i], gi, w1);
    m[i] = mi;
    const T vi = v[i] * b2 + one_minus_b2 * gi * gi;
    v[i] = vi;
    T vv = vi;
    if (amsgrad) {
      const T old = vmax[i];
      vv = (old > vi || old != old) ? old : vi;  // torch.maximum propagates NaN
      vmax[i] = vv;
    }
    const T denom = std::sqrt(vv) / bc2_sqrt + e;
    p[i] = pi + neg_step_size * (mi / denom);
  }
}

template <typename T>
void adam_impl(T* p, const T* g, T* m, T* v, T* vmax, std::int64_t n, std::int64_t step,
               double lr, double beta1, double beta2, double eps, double weight_decay,
               bool decoupled, bool amsgrad, bool maximize) {
  if (maximize) {
    adam_loop<T, true>(p, g, m, v, vmax, n, step, lr, beta1, beta2, eps, weight_decay, decoupled,
                       amsgrad);
  } else {
    adam_loop<T, false>(p, g, m, v, vmax, n, step, lr, beta1, beta2, eps, weight_decay, decoupled,
                        amsgrad);
  }
}

void check_buffer(const char* fn, const py::array& a, const py::array& param, const char* name,
                  bool inplace) {
  get_dtype(a, fn, name);
  check_same_dtype(a, param, fn, name, "param");
  if (inplace) {
    check_inplace(a, fn, name);
  } else {
    check_contiguous(a, fn, name);
  }
  check_same_size(a, param, fn, name, "param");
}

void check_nesterov(const char* fn, bool nesterov, double momentum, double dampening) {
  if (nesterov && (momentum <= 0.0 || dampening != 0.0)) {
    throw py::value_error(std::string(fn) +
                          ": Nesterov momentum requires a momentum and zero dampening");
  }
}

// The parameters and gradients of a multi-tensor call: checked, with their
// element counts; the arrays are kept referenced for the duration of the call.
struct TensorList {
  std::vector<py::array> params, grads;
  std::vector<std::int64_t> sizes;
  std::int64_t total = 0;
  DType dtype = DType::F32;
};

TensorList collect(const char* fn, const py::sequence& params, const py::sequence& grads) {
  TensorList t;
  const std::size_t n = params.size();
  if (grads.size() != n) {
    throw py::value_error(std::string(fn) + ": got " + std::to_string(n) + " params but " +
                          std::to_string(grads.size()) + " grads");
  }
  t.params.reserve(n);
  t.grads.reserve(n);
  t.sizes.reserve(n);
  for (std::size_t k = 0; k < n; ++k) {
    const std::string pn = "params[" + std::to_string(k) + "]";
    const std::string gn = "grads[" + std::to_string(k) + "]";
    py::object ph = params[k], gh = grads[k];
    if (!py::isinstance<py::array>(ph) || !py::isinstance<py::array>(gh)) {
      throw py::type_error(std::string(fn) + ": '" + (py::isinstance<py::array>(ph) ? gn : pn) +
                           "' must be a numpy.ndarray");
    }
    py::array p = py::reinterpret_borrow<py::array>(ph);
    py::array g = py::reinterpret_borrow<py::array>(gh);
    const DType dt = get_dtype(p, fn, pn.c_str());
    if (k == 0) {
      t.dtype = dt;
    } else {
      check_same_dtype(p, t.params[0], fn, pn.c_str(), "params[0]");
    }
    check_inplace(p, fn, pn.c_str());
    check_buffer(fn, g, p, gn.c_str(), false);
    t.sizes.push_back(p.size());
    t.total += p.size();
    t.params.push_back(std::move(p));
    t.grads.push_back(std::move(g));
  }
  return t;
}

// A flat state buffer of a multi-tensor call: one slice per parameter, in order.
void check_flat(const char* fn, const py::array& a, const TensorList& t, const char* name) {
  get_dtype(a, fn, name);
  if (!t.params.empty()) check_same_dtype(a, t.params[0], fn, name, "params[0]");
  check_inplace(a, fn, name);
  if (a.size() != t.total) {
    throw py::value_error(std::string(fn) + ": '" + name + "' has " + std::to_string(a.size()) +
                          " elements but the params have " + std::to_string(t.total) + " in all");
  }
}

void sgd_update(py::array param, const py::array& grad, std::optional<py::array> momentum_buf,
                double lr, double momentum, double dampening, bool nesterov, double weight_decay,
                bool first_step) {
  constexpr const char* fn = "sgd_update";
  const DType dt = get_dtype(param, fn, "param");
  check_inplace(param, fn, "param");
  check_buffer(fn, grad, param, "grad", false);
  check_nesterov(fn, nesterov, momentum, dampening);
  if (momentum != 0.0) {
    if (!momentum_buf) {
      throw py::value_error(std::string(fn) + ": momentum_buf is required when momentum != 0");
    }
    check_buffer(fn, *momentum_buf, param, "momentum_buf", true);
  }
  auto run = [&](auto tag) {
    using T = decltype(tag);
    T* buf = (momentum != 0.0) ? mptr<T>(*momentum_buf) : nullptr;
    T* p = mptr<T>(param);
    const T* g = cptr<T>(grad);
    const std::int64_t n = param.size();
    MaybeReleaseGil nogil(n);
    sgd_impl<T>(p, g, buf, n, lr, momentum, dampening, nesterov, weight_decay, first_step, false);
  };
  if (dt == DType::F32) {
    run(float{});
  } else {
    run(double{});
  }
}

void sgd_update_multi(const py::sequence& params, const py::sequence& grads,
                      std::optional<py::array> momentum_buf, double lr, double momentum,
                      double dampening, bool nesterov, double weight_decay, bool first_step,
                      bool maximize) {
  constexpr const char* fn = "sgd_update_multi";
  TensorList t = collect(fn, params, grads);
  check_nesterov(fn, nesterov, momentum, dampening);
  const bool use_mom = momentum != 0.0;
  if (use_mom) {
    if (!momentum_buf) {
      throw py::value_error(std::string(fn) + ": momentum_buf is required when momentum != 0");
    }
    check_flat(fn, *momentum_buf, t, "momentum_buf");
  }
  if (t.params.empty()) return;
  auto run = [&](auto tag) {
    using T = decltype(tag);
    const std::size_t n = t.params.size();
    std::vector<T*> p(n);
    std::vector<const T*> g(n);
    for (std::size_t k = 0; k < n; ++k) {
      p[k] = mptr<T>(t.params[k]);
      g[k] = cptr<T>(t.grads[k]);
    }
    T* buf = use_mom ? mptr<T>(*momentum_buf) : nullptr;
    MaybeReleaseGil nogil(t.total);
    std::int64_t off = 0;
    for (std::size_t k = 0; k < n; ++k) {
      sgd_impl<T>(p[k], g[k], use_mom ? buf + off : nullptr, t.sizes[k], lr, momentum, dampening,
                  nesterov, weight_decay, first_step, maximize);
      off += t.sizes[k];
    }
  };
  if (t.dtype == DType::F32) {
    run(float{});
  } else {
    run(double{});
  }
}

void adam_update(py::array param, const py::array& grad, py::array exp_avg, py::array exp_avg_sq,
                 std::optional<py::array> max_exp_avg_sq, std::int64_t step, double lr,
                 double beta1, double beta2, double eps, double weight_decay, bool decoupled,
                 bool amsgrad) {
  constexpr const char* fn = "adam_update";
  const DType dt = get_dtype(param, fn, "param");
  check_inplace(param, fn, "param");
  check_buffer(fn, grad, param, "grad", false);
  check_buffer(fn, exp_avg, param, "exp_avg", true);
  check_buffer(fn, exp_avg_sq, param, "exp_avg_sq", true);
  if (amsgrad) {
    if (!max_exp_avg_sq) {
      throw py::value_error(std::string(fn) + ": max_exp_avg_sq is required when amsgrad=True");
    }
    check_buffer(fn, *max_exp_avg_sq, param, "max_exp_avg_sq", true);
  }
  if (step < 1) throw py::value_error(std::string(fn) + ": step must be >= 1");
  auto run = [&](auto tag) {
    using T = decltype(tag);
    T* vmax = amsgrad ? mptr<T>(*max_exp_avg_sq) : nullptr;
    T* p = mptr<T>(param);
    const T* g = cptr<T>(grad);
    T* m = mptr<T>(exp_avg);
    T* v = mptr<T>(exp_avg_sq);
    const std::int64_t n = param.size();
    MaybeReleaseGil nogil(n);
    adam_impl<T>(p, g, m, v, vmax, n, step, lr, beta1, beta2, eps, weight_decay, decoupled,
                 amsgrad, false);
  };
  if (dt == DType::F32) {
    run(float{});
  } else {
    run(double{});
  }
}

void adam_update_multi(const py::sequence& params, const py::sequence& grads, py::array exp_avg,
                       py::array exp_avg_sq, std::optional<py::array> max_exp_avg_sq,
                       std::int64_t step, double lr, double beta1, double beta2, double eps,
                       double weight_decay, bool decoupled, bool amsgrad, bool maximize) {
  constexpr const char* fn = "adam_update_multi";
  TensorList t = collect(fn, params, grads);
  check_flat(fn, exp_avg, t, "exp_avg");
  check_flat(fn, exp_avg_sq, t, "exp_avg_sq");
  if (amsgrad) {
    if (!max_exp_avg_sq) {
      throw py::value_error(std::string(fn) + ": max_exp_avg_sq is required when amsgrad=True");
    }
    check_flat(fn, *max_exp_avg_sq, t, "max_exp_avg_sq");
  }
  if (step < 1) throw py::value_error(std::string(fn) + ": step must be >= 1");
  if (t.params.empty()) return;
  auto run = [&](auto tag) {
    using T = decltype(tag);
    const std::size_t n = t.params.size();
    std::vector<T*> p(n);
    std::vector<const T*> g(n);
    for (std::size_t k = 0; k < n; ++k) {
      p[k] = mptr<T>(t.params[k]);
      g[k] = cptr<T>(t.grads[k]);
    }
    T* m = mptr<T>(exp_avg);
    T* v = mptr<T>(exp_avg_sq);
    T* vmax = amsgrad ? mptr<T>(*max_exp_avg_sq) : nullptr;
    MaybeReleaseGil nogil(t.total);
    std::int64_t off = 0;
    for (std::size_t k = 0; k < n; ++k) {
      adam_impl<T>(p[k], g[k], m + off, v + off, amsgrad ? vmax + off : nullptr, t.sizes[k], step,
                   lr, beta1, beta2, eps, weight_decay, decoupled, amsgrad, maximize);
      off += t.sizes[k];
    }
  };
  if (t.dtype == DType::F32) {
    run(float{});
  } else {
    run(double{});
  }
}

}  // namespace

void register_optim(py::module_& m) {
  m.def("sgd_update", &sgd_update, py::arg("param"), py::arg("grad"), py::arg("momentum_buf"),
        py::arg("lr"), py::arg("momentum"), py::arg("dampening"), py::arg("nesterov"),
        py::arg("weight_decay"), py::arg("first_step"),
        "In-place SGD step (torch.optim.SGD semantics) on one parameter array.");
  m.def("sgd_update_multi", &sgd_update_multi, py::arg("params"), py::arg("grads"),
        py::arg("momentum_buf"), py::arg("lr"), py::arg("momentum"), py::arg("dampening"),
        py::arg("nesterov"), py::arg("weight_decay"), py::arg("first_step"), py::arg("maximize"),
        "In-place SGD step over a list of parameter arrays; momentum_buf is flat (the params' "
        "sizes one after the other).");
  m.def("adam_update", &adam_update, py::arg("param"), py::arg("grad"), py::arg("exp_avg"),
        py::arg("exp_avg_sq"), py::arg("max_exp_avg_sq"), py::arg("step"), py::arg("lr"),
        py::arg("beta1"), py::arg("beta2"), py::arg("eps"), py::arg("weight_decay"),
        py::arg("decoupled"), py::arg("amsgrad"),
        "In-place Adam/AdamW step (torch.optim.Adam semantics) on one parameter array.");
  m.def("adam_update_multi", &adam_update_multi, py::arg("params"), py::arg("grads"),
        py::arg("exp_avg"), py::arg("exp_avg_sq"), py::arg("max_exp_avg_sq"), py::arg("step"),
        py::arg("lr"), py::arg("beta1"), py::arg("beta2"), py::arg("eps"), py::arg("weight_decay"),
        py::arg("decoupled"), py::arg("amsgrad"), py::arg("maximize"),
        "In-place Adam/AdamW step over a list of parameter arrays; the states are flat (the "
        "params' sizes one after the other).");
}

}  // namespace flow_native
