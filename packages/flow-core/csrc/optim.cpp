// Fused optimizer updates over flat float32/float64 buffers, in place.
// The formulas and order of operations follow torch.optim.SGD / Adam / AdamW
// (single-tensor implementation): scalars are computed in double and cast to
// the buffer dtype, element math is done in the buffer dtype.
#include "common.h"
#include "kernels.h"

namespace flow_native {
namespace {

template <typename T>
void sgd_impl(T* FLOW_RESTRICT p, const T* FLOW_RESTRICT g, T* FLOW_RESTRICT buf, std::int64_t n,
              double lr, double momentum, double dampening, bool nesterov, double weight_decay,
              bool first_step) {
  const T wd = static_cast<T>(weight_decay);
  const T mom = static_cast<T>(momentum);
  const T one_minus_damp = static_cast<T>(1.0 - dampening);
  const T neg_lr = static_cast<T>(-lr);
  const bool use_wd = weight_decay != 0.0;
  const bool use_mom = momentum != 0.0;
  MaybeReleaseGil nogil(n);
#pragma omp parallel for simd schedule(static) if (n >= kParallelGrain)
  for (std::int64_t i = 0; i < n; ++i) {
    T d = g[i];
    if (use_wd) d = d + wd * p[i];
    if (use_mom) {
      const T b = first_step ? d : buf[i] * mom + one_minus_damp * d;
      buf[i] = b;
      d = nesterov ? d + mom * b : b;
    }
    p[i] = p[i] + neg_lr * d;
  }
}

// torch.lerp's formulation (more accurate for weights near 1).
template <typename T>
inline T lerp(T self, T end, T weight) {
  return std::abs(weight) < static_cast<T>(0.5) ? self + weight * (end - self)
                                                : end - (end - self) * (static_cast<T>(1) - weight);
}

template <typename T>
void adam_impl(T* FLOW_RESTRICT p, const T* FLOW_RESTRICT g, T* FLOW_RESTRICT m,
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
  MaybeReleaseGil nogil(n);
#pragma omp parallel for simd schedule(static) if (n >= kParallelGrain)
  for (std::int64_t i = 0; i < n; ++i) {
    T pi = p[i];
    T gi = g[i];
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

void sgd_update(py::array param, const py::array& grad, std::optional<py::array> momentum_buf,
                double lr, double momentum, double dampening, bool nesterov, double weight_decay,
                bool first_step) {
  constexpr const char* fn = "sgd_update";
  const DType dt = get_dtype(param, fn, "param");
  check_inplace(param, fn, "param");
  check_buffer(fn, grad, param, "grad", false);
  if (nesterov && (momentum <= 0.0 || dampening != 0.0)) {
    throw py::value_error(std::string(fn) +
                          ": Nesterov momentum requires a momentum and zero dampening");
  }
  if (momentum != 0.0) {
    if (!momentum_buf) {
      throw py::value_error(std::string(fn) + ": momentum_buf is required when momentum != 0");
    }
    check_buffer(fn, *momentum_buf, param, "momentum_buf", true);
  }
  auto run = [&](auto tag) {
    using T = decltype(tag);
    T* buf = (momentum != 0.0) ? mptr<T>(*momentum_buf) : nullptr;
    sgd_impl<T>(mptr<T>(param), cptr<T>(grad), buf, param.size(), lr, momentum, dampening,
                nesterov, weight_decay, first_step);
  };
  if (dt == DType::F32) {
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
    adam_impl<T>(mptr<T>(param), cptr<T>(grad), mptr<T>(exp_avg), mptr<T>(exp_avg_sq), vmax,
                 param.size(), step, lr, beta1, beta2, eps, weight_decay, decoupled, amsgrad);
  };
  if (dt == DType::F32) {
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
        "In-place SGD step (torch.optim.SGD semantics) on flat buffers.");
  m.def("adam_update", &adam_update, py::arg("param"), py::arg("grad"), py::arg("exp_avg"),
        py::arg("exp_avg_sq"), py::arg("max_exp_avg_sq"), py::arg("step"), py::arg("lr"),
        py::arg("beta1"), py::arg("beta2"), py::arg("eps"), py::arg("weight_decay"),
        py::arg("decoupled"), py::arg("amsgrad"),
        "In-place Adam/AdamW step (torch.optim.Adam semantics) on flat buffers.");
}

}  // namespace flow_native
