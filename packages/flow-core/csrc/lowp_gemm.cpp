// bfloat16 / float16 GEMM with float32 accumulation: C = A @ B (+ bias), batched as np.matmul.
//
// The CPU has no fast 16-bit float arithmetic, so the product is the float32 one: tiles of C are
// computed by the single-threaded sgemm bound in blas.cpp from float32 panels converted on the fly
// (an mc x K panel of A, a K x nc panel of B, each small enough to stay in cache), and each tile is
// rounded into the 16-bit output as it is finished. No whole-array float32 copy of A, B or C is
// made, which is what the convert-call-convert path of flow.backends.cpu.lowp paid for.
//
// Every tile is one sgemm over the full K, so each C element is accumulated in the same order as
// by one sgemm over the whole product: the result is bit-exact with NumPy's float32 matmul of the
// widened operands, rounded as astype rounds (round to nearest even; the conversions are lowp.cpp's,
// through lowp_convert.h).
//
// Operands are raw uint16 buffers with any strides (a transposed view from a backward pass reads a
// panel along its contiguous axis and hands sgemm the transpose flag; stride-0 batch dims are
// broadcast). Tiles run in flow's OpenMP pool under BlasSerial (OpenBLAS at one thread: no nested
// pools); a thread keeps its converted A panel while it walks the tiles of one row block.
#include "blas.h"
#include "common.h"
#include "lowp_convert.h"

#include <memory>


namespace flow_native {
namespace {

using lowp::f2u;
using lowp::u2f;

inline float from_f16(std::uint16_t h) { return u2f(lowp::f16_to_f32_1(h)); }
inline float from_bf16(std::uint16_t h) { return u2f(static_cast<std::uint32_t>(h) << 16); }

// -- contiguous row conversions: lowp.cpp's loops (F16C for float16), so both round alike

inline void bf16_row(const std::uint16_t* s, float* d, std::int64_t n) {
  lowp::bf16_to_f32_range(s, reinterpret_cast<std::uint32_t*>(d), 0, n);
}

inline void row_to_bf16(const float* s, std::uint16_t* d, std::int64_t n) {
  lowp::f32_to_bf16_range(reinterpret_cast<const std::uint32_t*>(s), d, 0, n);
}

inline void f16_row(const std::uint16_t* s, float* d, std::int64_t n) {
  lowp::f16_to_f32_range(s, reinterpret_cast<std::uint32_t*>(d), 0, n);
}

inline void row_to_f16(const float* s, std::uint16_t* d, std::int64_t n) {
  lowp::f32_to_f16_range(reinterpret_cast<const std::uint32_t*>(s), d, 0, n);
}

// -- panels

// A strided 2-d view of 16-bit items: element (r, c) at p[r * s0 + c * s1] (strides in items).
struct View {
  const std::uint16_t* p;
  std::int64_t s0, s1;
};

// The float32 copy of rows [r0, r0 + nr) x cols [0, nc) of v, laid out so that its contiguous axis
// is v's: row-major (nr x nc, returns false) when the columns are contiguous or nothing is,
// column-major (nc x nr, returns true: the transpose flag sgemm gets) when the rows are.
bool widen(const View& v, std::int64_t r0, std::int64_t nr, std::int64_t nc, bool f16, float* dst) {
  auto row = f16 ? f16_row : bf16_row;
  const std::uint16_t* base = v.p + r0 * v.s0;
  if (v.s1 == 1 || nc == 1) {
    if (v.s1 == 1)
      for (std::int64_t r = 0; r < nr; ++r) row(base + r * v.s0, dst + r * nc, nc);
    else
      for (std::int64_t r = 0; r < nr; ++r) dst[r] = f16 ? from_f16(base[r * v.s0]) : from_bf16(base[r * v.s0]);
    return false;
  }
  if (v.s0 == 1) {
    for (std::int64_t c = 0; c < nc; ++c) row(base + c * v.s1, dst + c * nr, nr);
    return true;
  }
  for (std::int64_t r = 0; r < nr; ++r)
    for (std::int64_t c = 0; c < nc; ++c) {
      const std::uint16_t h = base[r * v.s0 + c * v.s1];
      dst[r * nc + c] = f16 ? from_f16(h) : from_bf16(h);
    }
  return false;
}

// Why the blocking is what it is: NumPy's float32 product is one sgemm per matrix, and OpenBLAS
// does not sum every element in the same order for every call shape: it runs products of up to
// ~10^6 multiply-adds through separate "small matrix" kernels (on AVX-512 CPUs) and one-row or
// one-column products as gemv. A tile is therefore one sgemm of the same kind as the whole
// product: a matrix of under kWhole multiply-adds is one tile (its panels are cache-sized anyway),
// and a larger one is cut into row blocks of at least kTileWork multiply-adds each (well above
// the small-matrix limit), full width and full K, one per thread. B's float32 copy is shared by the row blocks of
// its matrix (converted once, in parallel); each row block converts its own panel of A.
constexpr std::int64_t kWhole = std::int64_t{1} << 22, kTileWork = std::int64_t{1} << 21, kMinRows = 64;

struct Problem {
  std::int64_t batch, m, n, k;
  std::vector<std::int64_t> bshape, sa, sb;  // batch dims and the item strides of a and b over them
  View a, b;                                 // the first matrix of each; batch offsets added per matrix
  const std::uint16_t* bias;                 // (n,) or null
  bool f16, out_f32;
  void* out;  // C-contiguous (batch, m, n): uint16 bits or float32
};

void offsets(const Problem& P, std::int64_t bi, std::int64_t& oa, std::int64_t& ob) {
  oa = ob = 0;
  for (std::int64_t d = static_cast<std::int64_t>(P.bshape.size()) - 1; d >= 0; --d) {
    const std::int64_t i = bi % P.bshape[d];
    bi /= P.bshape[d];
    oa += i * P.sa[d];
    ob += i * P.sb[d];
  }
}

// Rows [i0, i0 + mc) of matrix bi: C = pa @ pb (+ bias), rounded into the output. `c` is mc x n
// float32 scratch (unused for a float32 output, written in place).
void tile(const Problem& P, std::int64_t bi, std::int64_t i0, std::int64_t mc, const float* pa, bool ta,
          const float* pb, bool tb, const float* bias, float* c) {
  std::uint16_t* o16 = nullptr;
  if (P.out_f32) {
    c = static_cast<float*>(P.out) + (bi * P.m + i0) * P.n;
  } else {
    o16 = static_cast<std::uint16_t*>(P.out) + (bi * P.m + i0) * P.n;
  }
  if (P.k == 0) {
    std::fill(c, c + mc * P.n, 0.0f);
  } else {
    gemm(ta, tb, mc, P.n, P.k, 1.0f, pa, ta ? mc : P.k, pb, tb ? P.k : P.n, 0.0f, c, P.n);
  }
  for (std::int64_t i = 0; i < mc; ++i) {
    float* ci = c + i * P.n;
    if (bias) {
      FLOW_SIMD
      for (std::int64_t j = 0; j < P.n; ++j) ci[j] += bias[j];
    }
    if (o16) (P.f16 ? row_to_f16 : row_to_bf16)(ci, o16 + i * P.n, P.n);
  }
}

// B of matrix bi, widened: returns the transpose flag sgemm gets (see widen).
bool widen_b(const Problem& P, std::int64_t ob, float* dst) {
  // columns of B are rows of B^T (the view with its strides swapped)
  return !widen(View{P.b.p + ob, P.b.s1, P.b.s0}, 0, P.n, P.k, P.f16, dst);
}

// Per-thread float32 scratch, kept between calls: a fresh multi-megabyte allocation per GEMM
// costs page faults on every touch (and std::vector would zero it first), more than the
// conversions themselves. Buffers over kKeepBytes are freed after the call that needed them.
constexpr std::size_t kKeepBytes = std::size_t{1} << 20;

class Scratch {
 public:
  explicit Scratch(int slot) : slot_(slot) {}
  ~Scratch() {
    if (bufs()[slot_].cap * sizeof(float) > kKeepBytes) bufs()[slot_] = Buf{};
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  float* get(std::size_t n) {
    Buf& b = bufs()[slot_];
    if (b.cap < n) {
      b.p.reset(new float[n]);  // uninitialised: every element is written before it is read
      b.cap = n;
    }
    return b.p.get();
  }

 private:
  struct Buf {
    std::unique_ptr<float[]> p;
    std::size_t cap = 0;
  };
  static Buf* bufs() {
    thread_local Buf b[3];
    return b;
  }
  int slot_;
};

// Threads of the current parallel region (1 outside one or without OpenMP).
inline std::int64_t team_size() {
#ifdef _OPENMP
  return omp_get_num_threads();
#else
  return 1;
#endif
}

void run(const Problem& P) {
  const std::int64_t per = P.m * P.n * P.k;
  BlasSerial serial;
  MaybeReleaseGil nogil(P.batch * per);
  const bool par = P.batch * per >= (1 << 20) && max_threads() > 1;
  std::vector<float> bias(P.bias ? static_cast<std::size_t>(P.n) : 0);
  for (std::int64_t j = 0; j < static_cast<std::int64_t>(bias.size()); ++j)
    bias[j] = P.f16 ? from_f16(P.bias[j]) : from_bf16(P.bias[j]);
  const float* bp = P.bias ? bias.data() : nullptr;
  if (per < kWhole) {
    // small matrices (attention scores, small layers): one whole product per matrix, matrices in parallel
#pragma omp parallel if (par && P.batch > 1)
    {
      Scratch sa(0), sb(1), sc(2);
      float* pa = sa.get(static_cast<std::size_t>(P.m * P.k));
      float* pb = sb.get(static_cast<std::size_t>(P.k * P.n));
      float* pc = P.out_f32 ? nullptr : sc.get(static_cast<std::size_t>(P.m * P.n));
      std::int64_t have_b = -1;  // B's batch offset pb holds (a broadcast B is widened once)
      bool tb = false;
#pragma omp for schedule(static)
      for (std::int64_t bi = 0; bi < P.batch; ++bi) {
        std::int64_t oa, ob;
        offsets(P, bi, oa, ob);
        const bool ta = widen(View{P.a.p + oa, P.a.s0, P.a.s1}, 0, P.m, P.k, P.f16, pa);
        if (ob != have_b) {
          tb = widen_b(P, ob, pb);
          have_b = ob;
        }
        tile(P, bi, 0, P.m, pa, ta, pb, tb, bp, pc);
      }
    }
    return;
  }
  // large matrices: row blocks of at least kTileWork multiply-adds, the last one absorbing the rest
  // and no more blocks than threads: each sgemm call packs all of B again, so at one thread the
  // whole matrix is one call
  const std::int64_t threads = par ? max_threads() : 1;
  std::int64_t rows = std::max<std::int64_t>(kMinRows, (kTileWork + P.n * P.k - 1) / (P.n * P.k));
  rows = std::max<std::int64_t>(rows, (P.m + threads - 1) / threads);
  rows = (rows + 15) / 16 * 16;
  const std::int64_t blocks = std::max<std::int64_t>(1, P.m / rows);
  Scratch sb(1);  // the calling thread's slot: shared by the team
  float* pb = sb.get(static_cast<std::size_t>(P.k * P.n));
  std::int64_t have_b = -1;
  bool tb = false;
  for (std::int64_t bi = 0; bi < P.batch; ++bi) {
    std::int64_t oa, ob;
    offsets(P, bi, oa, ob);
#pragma omp parallel if (par)
    {
      if (ob != have_b) {
        // B widened by all threads, a slice of its rows (of B or B^T, whichever is contiguous) each
        const std::int64_t nt = team_size(), t = thread_id();
        const bool bt = P.b.s1 == 1 || P.b.s0 != 1;  // row-major copy (K x n): tb false
        const std::int64_t outer = bt ? P.k : P.n, inner = bt ? P.n : P.k;
        const std::int64_t lo = outer * t / nt, hi = outer * (t + 1) / nt;
        if (bt) {
          widen(View{P.b.p + ob + lo * P.b.s0, P.b.s0, P.b.s1}, 0, hi - lo, inner, P.f16, pb + lo * inner);
        } else {
          widen(View{P.b.p + ob + lo * P.b.s1, P.b.s1, P.b.s0}, 0, hi - lo, inner, P.f16, pb + lo * inner);
        }
#pragma omp barrier
#pragma omp single
        {
          tb = !bt;
          have_b = ob;
        }
      }
      // slots 0 and 2 of each thread (slot 1 of the calling thread holds B)
      Scratch sa(0), sc(2);
      float* pa = sa.get(static_cast<std::size_t>((rows * 2) * P.k));
      float* pc = P.out_f32 ? nullptr : sc.get(static_cast<std::size_t>((rows * 2) * P.n));
#pragma omp for schedule(static)
      for (std::int64_t r = 0; r < blocks; ++r) {
        const std::int64_t i0 = r * rows, mc = r == blocks - 1 ? P.m - i0 : rows;
        const bool ta = widen(View{P.a.p + oa, P.a.s0, P.a.s1}, i0, mc, P.k, P.f16, pa);
        tile(P, bi, i0, mc, pa, ta, pb, tb, bp, pc);
      }
    }
  }
}

// Item strides of a 16-bit array (NumPy gives bytes).
std::vector<std::int64_t> strides16(const py::array& a, const char* arg) {
  std::vector<std::int64_t> s(a.ndim());
  for (py::ssize_t d = 0; d < a.ndim(); ++d) {
    if (a.strides(d) % 2 != 0) throw py::value_error(std::string("lowp_gemm: '") + arg + "' has unaligned strides");
    s[d] = a.strides(d) / 2;
  }
  return s;
}

void check16(const py::array& a, const char* arg) {
  if (a.itemsize() != 2 || a.dtype().kind() != 'u')
    throw py::type_error(std::string("lowp_gemm: '") + arg +
                         "' must be a uint16 array (bfloat16 / float16 bits), got " +
                         dtype_name(a));
}

// a (..., m, k) and b (..., k, n) with equal batch dims (broadcast by the caller, stride 0 allowed);
// out C-contiguous (..., m, n), uint16 bits of the same format or float32.
py::array lowp_gemm(const py::array& a, const py::array& b, std::optional<py::array> bias, py::array out,
                    const std::string& format) {
  if (format != "bfloat16" && format != "float16")
    throw py::value_error("lowp_gemm: format must be 'bfloat16' or 'float16', got '" + format + "'");
  check16(a, "a");
  check16(b, "b");
  if (a.ndim() < 2 || a.ndim() != b.ndim())
    throw py::value_error("lowp_gemm: 'a' and 'b' must have the same number (>= 2) of dimensions, got " +
                          std::to_string(a.ndim()) + " and " + std::to_string(b.ndim()));
  if (!blas_ready()) throw py::value_error("lowp_gemm: no BLAS is bound (flow.backends.cpu.threads.install)");
  const py::ssize_t nd = a.ndim();
  Problem P;
  P.m = a.shape(nd - 2);
  P.k = a.shape(nd - 1);
  P.n = b.shape(nd - 1);
  if (b.shape(nd - 2) != P.k)
    throw py::value_error("lowp_gemm: inner dimensions differ (" + std::to_string(P.k) + " != " +
                          std::to_string(b.shape(nd - 2)) + ")");
  const auto sa = strides16(a, "a"), sb = strides16(b, "b");
  P.batch = 1;
  for (py::ssize_t d = 0; d < nd - 2; ++d) {
    if (a.shape(d) != b.shape(d)) throw py::value_error("lowp_gemm: batch dimensions of 'a' and 'b' differ");
    P.bshape.push_back(a.shape(d));
    P.sa.push_back(sa[d]);
    P.sb.push_back(sb[d]);
    P.batch *= a.shape(d);
  }
  P.a = View{static_cast<const std::uint16_t*>(a.data()), sa[nd - 2], sa[nd - 1]};
  P.b = View{static_cast<const std::uint16_t*>(b.data()), sb[nd - 2], sb[nd - 1]};
  P.f16 = format == "float16";
  P.bias = nullptr;
  if (bias) {
    check16(*bias, "bias");
    if (bias->ndim() != 1 || bias->shape(0) != P.n || !(bias->flags() & py::array::c_style))
      throw py::value_error("lowp_gemm: 'bias' must be C-contiguous of shape (" + std::to_string(P.n) + ",)");
    P.bias = static_cast<const std::uint16_t*>(bias->data());
  }
  P.out_f32 = out.dtype().equal(py::dtype::of<float>());
  if (!P.out_f32) check16(out, "out");
  if (!(out.flags() & py::array::c_style) || !out.writeable())
    throw py::value_error("lowp_gemm: 'out' must be a writable C-contiguous array");
  if (out.size() != P.batch * P.m * P.n) throw py::value_error("lowp_gemm: 'out' has the wrong size");
  P.out = out.mutable_data();
  if (P.batch * P.m * P.n > 0) run(P);
  return out;
}

}  // namespace

void register_lowp_gemm(py::module_& m) {
  m.def("lowp_gemm", &lowp_gemm, py::arg("a"), py::arg("b"), py::arg("bias"), py::arg("out"), py::arg("format"),
        "out = a @ b (+ bias) for bfloat16 / float16 bits (uint16, any strides) with float32 accumulation; "
        "out is C-contiguous uint16 bits of the same format or float32.");
}

}  // namespace flow_native
