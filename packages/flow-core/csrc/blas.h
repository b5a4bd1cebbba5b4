// GEMM through the BLAS NumPy already loaded (its exported ILP64 CBLAS symbols), and the guard that
// keeps that BLAS single-threaded while flow's own OpenMP threads call it.
//
// flow never links a BLAS of its own: flow.backends.cpu.threads finds NumPy's library in the
// process's mappings and hands its path and symbol names to blas_init, which dlopens it with
// RTLD_NOLOAD (the loaded copy, never a second one) and looks the symbols up.
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>

namespace flow_native {

// Whether blas_init found GEMM symbols (else the conv kernels below must not be called).
bool blas_ready();

// Row-major C (m, n) = alpha * op(A) @ op(B) + beta * C on the calling thread.
void gemm(bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const float* a,
          std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c, std::int64_t ldc);
void gemm(bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, double alpha, const double* a,
          std::int64_t lda, const double* b, std::int64_t ldb, double beta, double* c, std::int64_t ldc);

// OpenBLAS's own thread count (1 when unknown).
int blas_get_threads();

// Holds BLAS at one thread for its lifetime and restores the previous count after: flow's parallel
// regions call GEMM from every thread, and a multi-threaded BLAS there would start its own pool on
// top of flow's (nested pools, the spinning the policy exists to avoid).
class BlasSerial {
 public:
  BlasSerial();
  ~BlasSerial();
  BlasSerial(const BlasSerial&) = delete;
  BlasSerial& operator=(const BlasSerial&) = delete;

 private:
  int saved_;
};

void register_blas(pybind11::module_& m);

}  // namespace flow_native
