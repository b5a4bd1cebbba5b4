// flow._C: native CPU kernels for flow-core. Python users should go through
// flow.backends.cpu.native, which normalises inputs (contiguity, dtype
// checks) before calling in here.
#include "blas.h"
#include "common.h"
#include "kernels.h"

#ifndef FLOW_VERSION
#define FLOW_VERSION "0.0.0"
#endif

PYBIND11_MODULE(_C, m) {
  m.doc() = "flow-core native CPU kernels (pybind11, OpenMP)";
  m.attr("__version__") = FLOW_VERSION;
#ifdef _OPENMP
  m.attr("HAS_OPENMP") = true;
#else
  m.attr("HAS_OPENMP") = false;
#endif
  m.def("get_num_threads", &flow_native::max_threads,
        "Threads an OpenMP parallel region may use (1 without OpenMP).");
  m.def(
      "set_num_threads",
      [](int n) {
        if (n < 1) throw py::value_error("set_num_threads: n must be >= 1");
#ifdef _OPENMP
        omp_set_num_threads(n);
#endif
      },
      py::arg("n"), "Set the OpenMP thread count used by the kernels (no-op without OpenMP).");
  flow_native::register_softmax(m);
  flow_native::register_elementwise(m);
  flow_native::register_layer_norm(m);
  flow_native::register_optim(m);
  flow_native::register_lowp(m);
  flow_native::register_lowp_gemm(m);
  flow_native::register_batch_norm(m);
  flow_native::register_conv(m);
  flow_native::register_attention(m);
  flow_native::register_winograd(m);
  flow_native::register_blas(m);
  flow_native::register_allocator(m);
}
