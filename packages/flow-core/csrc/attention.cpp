// Fused scaled-dot-product attention (flash-attention style) on (N, L, E) query, (N, S, E) key and
// (N, S, Ev) value, N = batch * heads, all C-contiguous of one float dtype.
//
// The forward walks key blocks with an online softmax (running row max m and row sum l, the output
// rescaled as m grows), so only a (block x block) tile of scores ever exists; it returns the output
// and the per-row log-sum-exp lse = m + log(l), which is all the backward keeps. The backward
// recomputes each tile's probabilities as exp(s - lse) and runs in two passes so that every sum has
// one fixed order: pass A over (n, key block) accumulates dK and dV over the query blocks, pass B
// over (n, query block) accumulates dQ over the key blocks. No thread ever adds into another's rows,
// so results are identical at any thread count. Causal (top-left aligned: query i sees keys 0..i)
// skips the tiles above the diagonal.
//
// Tiles are multiplied by single-threaded GEMM through NumPy's BLAS (blas.h; BlasSerial keeps it off
// its own pool while flow's OpenMP threads call it), or by plain loops when no BLAS is bound.
#include <algorithm>
#include <cmath>
#include <limits>

#include "blas.h"
#include "common.h"
#include "kernels.h"

namespace flow_native {
namespace {

constexpr std::int64_t kBlockQ = 64;   // query rows per tile
constexpr std::int64_t kBlockK = 128;  // keys per tile

// This thread's scratch buffer `slot`, grown as needed and kept (OpenMP's threads live on).
template <typename T>
T* tile(int slot, std::int64_t size) {
  thread_local std::vector<T> bufs[4];
  std::vector<T>& b = bufs[slot];
  if (static_cast<std::int64_t>(b.size()) < size) b.resize(size);
  return b.data();
}

// Row-major C = alpha * op(A) @ op(B) + beta * C: the bound BLAS, else loops (same contract).
template <typename T>
void mm(bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, T alpha, const T* a, std::int64_t lda,
        const T* b, std::int64_t ldb, T beta, T* c, std::int64_t ldc) {
  if (blas_ready()) {
    gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  for (std::int64_t i = 0; i < m; ++i) {
    for (std::int64_t j = 0; j < n; ++j) {
      T s = 0;
      for (std::int64_t p = 0; p < k; ++p) {
        s += (ta ? a[p * lda + i] : a[i * lda + p]) * (tb ? b[j * ldb + p] : b[p * ldb + j]);
      }
      c[i * ldc + j] = (beta == T(0) ? T(0) : beta * c[i * ldc + j]) + alpha * s;
    }
  }
}

struct Dims {
  std::int64_t n, l, s, e, ev;
};

// Keys a query row may see: all S, or (causal) 0..i.
inline std::int64_t keys_for_row(std::int64_t i, std::int64_t s, bool causal) {
  return causal ? std::min(s, i + 1) : s;
}

template <typename T>
void forward_impl(const T* q, const T* k, const T* v, T* out, T* lse, const Dims& d, bool causal, T scale) {
  const std::int64_t nqb = (d.l + kBlockQ - 1) / kBlockQ, tasks = d.n * nqb;
  const bool par = tasks > 1 && d.n * d.l * d.s * (d.e + d.ev) >= kParallelGrain;
  const T ninf = -std::numeric_limits<T>::infinity();
#pragma omp parallel for schedule(dynamic, 1) if (par)
  for (std::int64_t t = 0; t < tasks; ++t) {
    const std::int64_t b = t / nqb, i0 = (t % nqb) * kBlockQ, bq = std::min(kBlockQ, d.l - i0);
    const T* qb = q + (b * d.l + i0) * d.e;
    const T* kb = k + b * d.s * d.e;
    const T* vb = v + b * d.s * d.ev;
    T* ob = out + (b * d.l + i0) * d.ev;
    T* sc = tile<T>(0, kBlockQ * kBlockK);
    T* m = tile<T>(1, kBlockQ);
    T* l = tile<T>(2, kBlockQ);
    std::fill(m, m + bq, ninf);
    std::fill(l, l + bq, T(0));
    std::fill(ob, ob + bq * d.ev, T(0));
    const std::int64_t kend = keys_for_row(i0 + bq - 1, d.s, causal);  // the tile's last row sees the most
    for (std::int64_t j0 = 0; j0 < kend; j0 += kBlockK) {
      const std::int64_t bk = std::min(kBlockK, kend - j0);
      mm<T>(false, true, bq, bk, d.e, scale, qb, d.e, kb + j0 * d.e, d.e, T(0), sc, bk);
      for (std::int64_t r = 0; r < bq; ++r) {
        T* sr = sc + r * bk;
        // keys of this tile the row sees (causal rows above the tile's last one see fewer)
        const std::int64_t nk = std::max<std::int64_t>(0, std::min(bk, keys_for_row(i0 + r, d.s, causal) - j0));
        if (nk == 0) {
          std::fill(sr, sr + bk, T(0));
          continue;
        }
        T mx = m[r];
        FLOW_SIMD_REDUCE(max, mx)
        for (std::int64_t j = 0; j < nk; ++j) mx = std::max(mx, sr[j]);
        const T alpha = std::exp(m[r] - mx);  // exp(-inf) = 0 on the row's first tile
        T sum = 0;
        // exp_fast: the vectorisable exp of common.h (float; std::exp for double)
        FLOW_SIMD_REDUCE(+, sum)
        for (std::int64_t j = 0; j < nk; ++j) {
          sr[j] = exp_fast(sr[j] - mx);
          sum += sr[j];
        }
        std::fill(sr + nk, sr + bk, T(0));
        l[r] = l[r] * alpha + sum;
        m[r] = mx;
        if (alpha != T(1)) {
          T* orow = ob + r * d.ev;
          FLOW_SIMD
          for (std::int64_t c = 0; c < d.ev; ++c) orow[c] *= alpha;
        }
      }
      mm<T>(false, false, bq, d.ev, bk, T(1), sc, bk, vb + j0 * d.ev, d.ev, T(1), ob, d.ev);
    }
    for (std::int64_t r = 0; r < bq; ++r) {
      const T inv = T(1) / l[r];
      T* orow = ob + r * d.ev;
      FLOW_SIMD
      for (std::int64_t c = 0; c < d.ev; ++c) orow[c] *= inv;
      lse[b * d.l + i0 + r] = m[r] + std::log(l[r]);
    }
  }
}

// One tile of the backward: p = exp(q k^T * scale - lse) (zero where masked) into `p`, then
// ds = p * (dout v^T - delta) into `ds`. Rows [i0, i0 + bq), keys [j0, j0 + bk) of batch entry b.
template <typename T>
void tile_grad(const T* q, const T* k, const T* v, const T* dout, const T* lse, const T* delta, const Dims& d,
               bool causal, T scale, std::int64_t b, std::int64_t i0, std::int64_t bq, std::int64_t j0,
               std::int64_t bk, T* p, T* ds) {
  mm<T>(false, true, bq, bk, d.e, scale, q + (b * d.l + i0) * d.e, d.e, k + (b * d.s + j0) * d.e, d.e, T(0), p, bk);
  mm<T>(false, true, bq, bk, d.ev, T(1), dout + (b * d.l + i0) * d.ev, d.ev, v + (b * d.s + j0) * d.ev, d.ev, T(0), ds,
        bk);
  for (std::int64_t r = 0; r < bq; ++r) {
    const std::int64_t row = b * d.l + i0 + r;
    const std::int64_t nk = std::max<std::int64_t>(0, std::min(bk, keys_for_row(i0 + r, d.s, causal) - j0));
    const T lr = lse[row], dr = delta[row];
    T* pr = p + r * bk;
    T* dsr = ds + r * bk;
    FLOW_SIMD
    for (std::int64_t j = 0; j < nk; ++j) {
      pr[j] = exp_fast(pr[j] - lr);
      dsr[j] = pr[j] * (dsr[j] - dr);
    }
    std::fill(pr + nk, pr + bk, T(0));
    std::fill(dsr + nk, dsr + bk, T(0));
  }
}

template <typename T>
void backward_impl(const T* dout, const T* q, const T* k, const T* v, const T* out, const T* lse, const T* glse,
                   T* dq, T* dk, T* dv, const Dims& d, bool causal, T scale) {
  const bool par = d.n * d.l * d.s * (d.e + d.ev) >= kParallelGrain;
  // delta_i = rowsum(dout_i * out_i) - glse_i: the softmax backward's per-row term (d lse / d s = p, so a
  // gradient of the log-sum-exp output folds in here)
  std::vector<T> delta_buf(static_cast<std::size_t>(d.n * d.l));
  T* delta = delta_buf.data();
#pragma omp parallel for schedule(static) if (par)
  for (std::int64_t r = 0; r < d.n * d.l; ++r) {
    const T* a = dout + r * d.ev;
    const T* o = out + r * d.ev;
    T s = 0;
    for (std::int64_t c = 0; c < d.ev; ++c) s += a[c] * o[c];
    delta[r] = glse ? s - glse[r] : s;
  }
  // pass A: dK, dV of each key block, summed over the query blocks in order
  const std::int64_t nkb = (d.s + kBlockK - 1) / kBlockK, ktasks = d.n * nkb;
#pragma omp parallel for schedule(dynamic, 1) if (par && ktasks > 1)
  for (std::int64_t t = 0; t < ktasks; ++t) {
    const std::int64_t b = t / nkb, j0 = (t % nkb) * kBlockK, bk = std::min(kBlockK, d.s - j0);
    T* dkb = dk + (b * d.s + j0) * d.e;
    T* dvb = dv + (b * d.s + j0) * d.ev;
    std::fill(dkb, dkb + bk * d.e, T(0));
    std::fill(dvb, dvb + bk * d.ev, T(0));
    T* p = tile<T>(0, kBlockQ * kBlockK);
    T* ds = tile<T>(1, kBlockQ * kBlockK);
    // causal: query rows before j0 see none of these keys
    const std::int64_t first = causal ? (std::min(j0, d.l) / kBlockQ) * kBlockQ : 0;
    for (std::int64_t i0 = first; i0 < d.l; i0 += kBlockQ) {
      const std::int64_t bq = std::min(kBlockQ, d.l - i0);
      tile_grad(q, k, v, dout, lse, delta, d, causal, scale, b, i0, bq, j0, bk, p, ds);
      mm<T>(true, false, bk, d.ev, bq, T(1), p, bk, dout + (b * d.l + i0) * d.ev, d.ev, T(1), dvb, d.ev);
      mm<T>(true, false, bk, d.e, bq, scale, ds, bk, q + (b * d.l + i0) * d.e, d.e, T(1), dkb, d.e);
    }
  }
  // pass B: dQ of each query block, summed over the key blocks in order
  const std::int64_t nqb = (d.l + kBlockQ - 1) / kBlockQ, qtasks = d.n * nqb;
#pragma omp parallel for schedule(dynamic, 1) if (par && qtasks > 1)
  for (std::int64_t t = 0; t < qtasks; ++t) {
    const std::int64_t b = t / nqb, i0 = (t % nqb) * kBlockQ, bq = std::min(kBlockQ, d.l - i0);
    T* dqb = dq + (b * d.l + i0) * d.e;
    std::fill(dqb, dqb + bq * d.e, T(0));
    T* p = tile<T>(0, kBlockQ * kBlockK);
    T* ds = tile<T>(1, kBlockQ * kBlockK);
    const std::int64_t kend = keys_for_row(i0 + bq - 1, d.s, causal);
    for (std::int64_t j0 = 0; j0 < kend; j0 += kBlockK) {
      const std::int64_t bk = std::min(kBlockK, kend - j0);
      tile_grad(q, k, v, dout, lse, delta, d, causal, scale, b, i0, bq, j0, bk, p, ds);
      mm<T>(false, false, bq, d.e, bk, scale, ds, bk, k + (b * d.s + j0) * d.e, d.e, T(1), dqb, d.e);
    }
  }
}

// Checks shared by both entry points: 3-d C-contiguous arrays of q's dtype, with matching N, E, S.
Dims check_qkv(const char* fn, const py::array& q, const py::array& k, const py::array& v) {
  const std::string f(fn);
  get_dtype(q, fn, "q");
  check_same_dtype(k, q, fn, "k", "q");
  check_same_dtype(v, q, fn, "v", "q");
  for (const auto* a : {&q, &k, &v}) {
    if (a->ndim() != 3) throw py::value_error(f + ": q, k and v must be 3-d (batch * heads, length, embedding)");
    check_contiguous(*a, fn, a == &q ? "q" : a == &k ? "k" : "v");
  }
  const Dims d{q.shape(0), q.shape(1), k.shape(1), q.shape(2), v.shape(2)};
  if (k.shape(0) != d.n || v.shape(0) != d.n) throw py::value_error(f + ": q, k and v must have the same dim 0");
  if (k.shape(2) != d.e) throw py::value_error(f + ": q and k must have the same embedding size (dim 2)");
  if (v.shape(1) != d.s) throw py::value_error(f + ": k and v must have the same length (dim 1)");
  if (d.s == 0 && d.l > 0) throw py::value_error(f + ": k must have at least one position");
  return d;
}

void check_like(const char* fn, const py::array& a, const py::array& q, std::vector<py::ssize_t> shape,
                const char* arg) {
  check_same_dtype(a, q, fn, arg, "q");
  check_contiguous(a, fn, arg);
  if (shape_of(a) != shape) throw py::value_error(std::string(fn) + ": '" + arg + "' has the wrong shape");
}

py::tuple flash_attention_forward(const py::array& q, const py::array& k, const py::array& v, bool causal,
                                  double scale) {
  constexpr const char* fn = "flash_attention_forward";
  const Dims d = check_qkv(fn, q, k, v);
  const DType dt = get_dtype(q, fn, "q");
  py::array out = dt == DType::F32 ? empty_shape<float>({d.n, d.l, d.ev}) : empty_shape<double>({d.n, d.l, d.ev});
  py::array lse = dt == DType::F32 ? empty_shape<float>({d.n, d.l}) : empty_shape<double>({d.n, d.l});
  if (d.n * d.l == 0) return py::make_tuple(out, lse);
  {
    py::gil_scoped_release nogil;
    BlasSerial serial;
    if (dt == DType::F32) {
      forward_impl<float>(cptr<float>(q), cptr<float>(k), cptr<float>(v), mptr<float>(out), mptr<float>(lse), d,
                          causal, static_cast<float>(scale));
    } else {
      forward_impl<double>(cptr<double>(q), cptr<double>(k), cptr<double>(v), mptr<double>(out), mptr<double>(lse),
                           d, causal, scale);
    }
  }
  return py::make_tuple(out, lse);
}

py::tuple flash_attention_backward(const py::array& dout, const py::array& q, const py::array& k,
                                   const py::array& v, const py::array& out, const py::array& lse,
                                   const std::optional<py::array>& glse, bool causal, double scale) {
  constexpr const char* fn = "flash_attention_backward";
  const Dims d = check_qkv(fn, q, k, v);
  check_like(fn, dout, q, {d.n, d.l, d.ev}, "dout");
  check_like(fn, out, q, {d.n, d.l, d.ev}, "out");
  check_like(fn, lse, q, {d.n, d.l}, "lse");
  if (glse) check_like(fn, *glse, q, {d.n, d.l}, "glse");
  const DType dt = get_dtype(q, fn, "q");
  py::array dq = dt == DType::F32 ? empty_like_shape<float>(q) : empty_like_shape<double>(q);
  py::array dk = dt == DType::F32 ? empty_like_shape<float>(k) : empty_like_shape<double>(k);
  py::array dv = dt == DType::F32 ? empty_like_shape<float>(v) : empty_like_shape<double>(v);
  if (dk.size() + dv.size() > 0 && d.l == 0) {  // no queries: nothing flows to the keys
    std::memset(dk.mutable_data(), 0, dk.nbytes());
    std::memset(dv.mutable_data(), 0, dv.nbytes());
  }
  if (d.n * d.l == 0) return py::make_tuple(dq, dk, dv);
  {
    py::gil_scoped_release nogil;
    BlasSerial serial;
    const void* g = glse ? glse->data() : nullptr;
    if (dt == DType::F32) {
      backward_impl<float>(cptr<float>(dout), cptr<float>(q), cptr<float>(k), cptr<float>(v), cptr<float>(out),
                           cptr<float>(lse), static_cast<const float*>(g), mptr<float>(dq), mptr<float>(dk),
                           mptr<float>(dv), d, causal, static_cast<float>(scale));
    } else {
      backward_impl<double>(cptr<double>(dout), cptr<double>(q), cptr<double>(k), cptr<double>(v),
                            cptr<double>(out), cptr<double>(lse), static_cast<const double*>(g), mptr<double>(dq),
                            mptr<double>(dk), mptr<double>(dv), d, causal, scale);
    }
  }
  return py::make_tuple(dq, dk, dv);
}

}  // namespace

void register_attention(py::module_& m) {
  m.def("flash_attention_forward", &flash_attention_forward, py::arg("q"), py::arg("k"), py::arg("v"),
        py::arg("causal"), py::arg("scale"),
        "Blocked attention of (N, L, E) q, (N, S, E) k, (N, S, Ev) v: returns (out (N, L, Ev), lse (N, L)).");
  m.def("flash_attention_backward", &flash_attention_backward, py::arg("dout"), py::arg("q"), py::arg("k"),
        py::arg("v"), py::arg("out"), py::arg("lse"), py::arg("glse"), py::arg("causal"), py::arg("scale"),
        "Gradients (dq, dk, dv) of flash_attention_forward (glse: the lse output's, or None), recomputing the "
        "probabilities tile by tile.");
}

}  // namespace flow_native
