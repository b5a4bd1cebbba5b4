// Runtime binding to NumPy's BLAS (see blas.h) and the Python entry points of the thread policy.
#include "blas.h"

#include <dlfcn.h>

#include "common.h"

namespace flow_native {
namespace {

// CBLAS enums (cblas.h): row-major order, no transpose, transpose.
constexpr int kRowMajor = 101, kNoTrans = 111, kTrans = 112;

using sgemm_fn = void (*)(int, int, int, std::int64_t, std::int64_t, std::int64_t, float, const float*, std::int64_t,
                          const float*, std::int64_t, float, float*, std::int64_t);
using dgemm_fn = void (*)(int, int, int, std::int64_t, std::int64_t, std::int64_t, double, const double*,
                          std::int64_t, const double*, std::int64_t, double, double*, std::int64_t);
using set_threads_fn = void (*)(int);
using get_threads_fn = int (*)();

struct Blas {
  sgemm_fn sgemm = nullptr;
  dgemm_fn dgemm = nullptr;
  set_threads_fn set_threads = nullptr;
  get_threads_fn get_threads = nullptr;
};

Blas g_blas;

void* symbol(void* lib, const std::string& name) {
  void* p = dlsym(lib, name.c_str());
  if (p == nullptr) throw py::value_error("blas_init: symbol '" + name + "' not found in the library");
  return p;
}

// Bind to the already-loaded library at `path`; the symbol names differ between OpenBLAS builds
// (scipy-openblas prefixes and suffixes them), so the caller names them.
void blas_init(const std::string& path, const std::string& sgemm, const std::string& dgemm,
               const std::string& set_threads, const std::string& get_threads) {
  // RTLD_NOLOAD: only a library this process already has mapped; never a second BLAS
  void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_NOLOAD);
  if (lib == nullptr) throw py::value_error("blas_init: '" + path + "' is not loaded in this process");
  Blas b;
  b.sgemm = reinterpret_cast<sgemm_fn>(symbol(lib, sgemm));
  b.dgemm = reinterpret_cast<dgemm_fn>(symbol(lib, dgemm));
  b.set_threads = reinterpret_cast<set_threads_fn>(symbol(lib, set_threads));
  b.get_threads = reinterpret_cast<get_threads_fn>(symbol(lib, get_threads));
  g_blas = b;  // the handle stays open: the symbols must outlive this call
}

// For the tests: inside one of flow's parallel regions (under BlasSerial, as the conv kernels run),
// the BLAS thread count each OpenMP thread sees, and the number of threads of the region.
py::tuple blas_threads_in_parallel() {
  BlasSerial serial;
  int seen = 0, team = 1;
#pragma omp parallel reduction(max : seen)
  {
    seen = blas_get_threads();
#ifdef _OPENMP
#pragma omp single
    team = omp_get_num_threads();
#endif
  }
  return py::make_tuple(seen, team);
}

}  // namespace

bool blas_ready() { return g_blas.sgemm != nullptr; }

int blas_get_threads() { return g_blas.get_threads ? g_blas.get_threads() : 1; }

BlasSerial::BlasSerial() : saved_(blas_get_threads()) {
  if (saved_ > 1) g_blas.set_threads(1);
}

BlasSerial::~BlasSerial() {
  if (saved_ > 1) g_blas.set_threads(saved_);
}

void gemm(bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const float* a,
          std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c, std::int64_t ldc) {
  g_blas.sgemm(kRowMajor, ta ? kTrans : kNoTrans, tb ? kTrans : kNoTrans, m, n, k, alpha, a, lda, b, ldb, beta, c,
               ldc);
}

void gemm(bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, double alpha, const double* a,
          std::int64_t lda, const double* b, std::int64_t ldb, double beta, double* c, std::int64_t ldc) {
  g_blas.dgemm(kRowMajor, ta ? kTrans : kNoTrans, tb ? kTrans : kNoTrans, m, n, k, alpha, a, lda, b, ldb, beta, c,
               ldc);
}

void register_blas(py::module_& m) {
  m.def("blas_init", &blas_init, py::arg("path"), py::arg("sgemm"), py::arg("dgemm"), py::arg("set_threads"),
        py::arg("get_threads"), "Bind GEMM and thread control to the already-loaded BLAS at path.");
  m.def("blas_ready", &blas_ready, "Whether blas_init bound a BLAS.");
  m.def("blas_get_threads", &blas_get_threads, "The bound BLAS's thread count (1 when none is bound).");
  m.def("blas_threads_in_parallel", &blas_threads_in_parallel,
        "(BLAS threads seen inside a flow parallel region, the region's thread count).");
}

}  // namespace flow_native
