// Winograd F(2x2, 3x3) convolution: conv2d forward for a 3x3 kernel at stride 1, dilation 1, groups 1,
// of C-contiguous NCHW float32 / float64 arrays, with any (also negative) padding.
//
// The output is cut into 2x2 tiles; each reads a 4x4 input patch. With the transforms
//   U = G g G^T (filter, 4x4 per (o, c)),  V = B^T d B (input patch, 4x4 per (c, tile)),
//   Y = A^T M A with M[e] = sum_c U[e][o][c] V[e][c][tile] for each of the 16 elements e,
// a tile costs 16 products per (o, c) instead of 36: the 16 sums over c are 16 GEMMs
// (O, C) @ (C, tiles) through the bound single-threaded BLAS.
//
// Work is cut into blocks of `kb` tiles of the batch's flattened (image, tile row, tile column)
// order; kb comes from the shapes only (never the thread count) and each OpenMP thread runs whole
// blocks (input transform, 16 GEMMs, output transform into distinct output pixels), so results
// are identical at any thread count. Padding is applied while reading the patches (out-of-range
// reads are zero); no padded copy of the input is made.
#include "blas.h"
#include "common.h"
#include "kernels.h"

namespace flow_native {
namespace {

struct WinoShape {
  std::int64_t n, c, h, w, o, ho, wo, pt, pl;
  std::int64_t th, tw, tiles, kb;  // tile grid per image, tiles in the batch, tiles per block
  // distance between the 16 element matrices of U (O, C), V (C, kb) and M (O, kb): their sizes plus
  // kPad, since the transforms write / read all 16 at once and power-of-two distances (C * kb often
  // is one) put the 16 streams in the same cache sets (measured: the filter transform ran 5x slower)
  std::int64_t ue, ve, me;
};

constexpr std::int64_t kMaxBlock = 256;  // the largest tiles_per_block
constexpr std::int64_t kMaxRow = 2 * kMaxBlock + 2;
constexpr std::int64_t kPad = 32;  // elements between element matrices (see WinoShape)

// Tiles per block: the block's transformed input (16, C, kb) and products (16, O, kb) stay near
// 2^20 elements each (a few MB per thread), kb a multiple of 16 in [32, 256] so the GEMMs stay wide
// (measured on ResNet-18 shapes: 2^18 was up to 10% slower at 512 channels, the same elsewhere).
std::int64_t tiles_per_block(std::int64_t c, std::int64_t o) {
  const std::int64_t widest = std::max<std::int64_t>(1, std::max(c, o));
  std::int64_t kb = (std::int64_t(1) << 20) / (16 * widest);
  kb = (kb / 16) * 16;
  return std::min(kMaxBlock, std::max<std::int64_t>(32, kb));
}

template <typename T>
T* block_scratch(int slot, std::int64_t size) {
  thread_local std::vector<T> bufs[3];  // transformed input, products, transformed filter
  std::vector<T>& b = bufs[slot];
  if (static_cast<std::int64_t>(b.size()) < size) b.resize(size);
  return b.data();
}

// U (16, O, C) = G g G^T for every (o, c) of the (O, C, 3, 3) weight.
template <typename T>
void filter_transform(const T* FLOW_RESTRICT w, T* FLOW_RESTRICT u, std::int64_t o, std::int64_t c,
                      std::int64_t ue) {
  const std::int64_t oc = o * c;
#pragma omp parallel for schedule(static) if (oc * 16 >= kParallelGrain)
  for (std::int64_t k = 0; k < oc; ++k) {
    const T* g = w + k * 9;
    T t[4][3];  // G g: rows g0, (g0 + g1 + g2) / 2, (g0 - g1 + g2) / 2, g2
    for (int j = 0; j < 3; ++j) {
      const T a = g[j], b = g[3 + j], d = g[6 + j];
      t[0][j] = a;
      t[1][j] = T(0.5) * (a + b + d);
      t[2][j] = T(0.5) * (a - b + d);
      t[3][j] = d;
    }
    for (int i = 0; i < 4; ++i) {  // (G g) G^T
      const T a = t[i][0], b = t[i][1], d = t[i][2];
      u[(i * 4 + 0) * ue + k] = a;
      u[(i * 4 + 1) * ue + k] = T(0.5) * (a + b + d);
      u[(i * 4 + 2) * ue + k] = T(0.5) * (a - b + d);
      u[(i * 4 + 3) * ue + k] = d;
    }
  }
}

// A run of a block's tiles along one tile row: tiles (img, ty, tx0 .. tx0 + n) at block column k.
// The transforms work on whole runs so that their inner loops run over contiguous tiles (vectorised)
// instead of one 4x4 patch at a time.
struct Run {
  std::int64_t img, ty, tx0, n, k;
};

std::int64_t tile_runs(const WinoShape& s, std::int64_t t0, std::int64_t nt, Run* runs) {
  const std::int64_t per_img = s.th * s.tw;
  std::int64_t count = 0;
  for (std::int64_t t = t0; t < t0 + nt;) {
    const std::int64_t r = t % per_img, tx = r % s.tw, n = std::min(s.tw - tx, t0 + nt - t);
    runs[count++] = {t / per_img, r / s.tw, tx, n, t - t0};
    t += n;
  }
  return count;
}

// V (16, C, kb) for the block's tiles: B^T d B of each 4x4 patch. Per run and channel: the run's four
// input rows (zero outside the image: the padding), B^T over them (whole rows), then B over each
// tile's four columns (stride-2 loads, one loop per element).
template <typename T>
void input_transform(const T* FLOW_RESTRICT x, T* FLOW_RESTRICT v, const WinoShape& s, const Run* runs,
                     std::int64_t nruns) {
  const std::int64_t ld = s.ve, hw = s.h * s.w;
  T p[4][kMaxRow], r[4][kMaxRow];
  for (std::int64_t q = 0; q < nruns; ++q) {
    const Run& u = runs[q];
    const std::int64_t y0 = 2 * u.ty - s.pt, xs = 2 * u.tx0 - s.pl, len = 2 * u.n + 2;
    const std::int64_t lo = std::min(len, std::max<std::int64_t>(0, -xs));
    const std::int64_t hi = std::max(lo, std::min(len, s.w - xs));
    for (std::int64_t c = 0; c < s.c; ++c) {
      const T* plane = x + (u.img * s.c + c) * hw;
      for (int i = 0; i < 4; ++i) {
        const std::int64_t y = y0 + i;
        T* pi = p[i];
        if (y < 0 || y >= s.h) {
          std::fill(pi, pi + len, T(0));
          continue;
        }
        const T* row = plane + y * s.w;
        for (std::int64_t j = 0; j < lo; ++j) pi[j] = T(0);
        FLOW_SIMD
        for (std::int64_t j = lo; j < hi; ++j) pi[j] = row[xs + j];
        for (std::int64_t j = hi; j < len; ++j) pi[j] = T(0);
      }
      FLOW_SIMD
      for (std::int64_t j = 0; j < len; ++j) {  // B^T d: rows d0 - d2, d1 + d2, d2 - d1, d1 - d3
        r[0][j] = p[0][j] - p[2][j];
        r[1][j] = p[1][j] + p[2][j];
        r[2][j] = p[2][j] - p[1][j];
        r[3][j] = p[1][j] - p[3][j];
      }
      T* dst = v + c * s.kb + u.k;
      for (int i = 0; i < 4; ++i) {  // (B^T d) B: the same combinations of each tile's columns
        const T* ri = r[i];
        T* d0 = dst + (i * 4 + 0) * ld;
        T* d1 = dst + (i * 4 + 1) * ld;
        T* d2 = dst + (i * 4 + 2) * ld;
        T* d3 = dst + (i * 4 + 3) * ld;
        FLOW_SIMD
        for (std::int64_t k = 0; k < u.n; ++k) {
          const T c0 = ri[2 * k], c1 = ri[2 * k + 1], c2 = ri[2 * k + 2], c3 = ri[2 * k + 3];
          d0[k] = c0 - c2;
          d1[k] = c1 + c2;
          d2[k] = c2 - c1;
          d3[k] = c1 - c3;
        }
      }
    }
  }
}

// The block's output pixels = A^T M A from its products M (16, O, kb), per run and output channel:
// A^T over the 16 element rows (contiguous in the tiles), then A into the two output rows.
template <typename T>
void output_transform(const T* FLOW_RESTRICT m, T* FLOW_RESTRICT out, const WinoShape& s, const Run* runs,
                      std::int64_t nruns) {
  const std::int64_t ld = s.me, hw = s.ho * s.wo;
  T a[2][4][kMaxBlock], row[kMaxRow];
  for (std::int64_t q = 0; q < nruns; ++q) {
    const Run& u = runs[q];
    const std::int64_t x0 = 2 * u.tx0, width = std::min(2 * u.n, s.wo - x0);
    for (std::int64_t o = 0; o < s.o; ++o) {
      const T* src = m + o * s.kb + u.k;
      for (int j = 0; j < 4; ++j) {  // A^T M: rows m0 + m1 + m2, m1 - m2 - m3
        const T *m0 = src + j * ld, *m1 = src + (4 + j) * ld, *m2 = src + (8 + j) * ld, *m3 = src + (12 + j) * ld;
        T *a0 = a[0][j], *a1 = a[1][j];
        FLOW_SIMD
        for (std::int64_t k = 0; k < u.n; ++k) {
          a0[k] = m0[k] + m1[k] + m2[k];
          a1[k] = m1[k] - m2[k] - m3[k];
        }
      }
      T* plane = out + (u.img * s.o + o) * hw;
      for (int i = 0; i < 2; ++i) {
        const std::int64_t y = 2 * u.ty + i;
        if (y >= s.ho) break;  // the last tile row of an odd output height
        const T *q0 = a[i][0], *q1 = a[i][1], *q2 = a[i][2], *q3 = a[i][3];
        // full-width runs write the output row directly; the last run of an odd width goes through `row`
        T* dst = width == 2 * u.n ? plane + y * s.wo + x0 : row;
        FLOW_SIMD
        for (std::int64_t k = 0; k < u.n; ++k) {
          dst[2 * k] = q0[k] + q1[k] + q2[k];
          dst[2 * k + 1] = q1[k] - q2[k] - q3[k];
        }
        if (dst == row) std::copy(row, row + width, plane + y * s.wo + x0);
      }
    }
  }
}

template <typename T>
void winograd_impl(const T* x, const T* w, T* out, const WinoShape& s) {
  // the calling thread's buffer, kept: a fresh one (16 MB at 512 channels) would fault its pages in
  // on every call, which cost more than the transform itself
  T* U = block_scratch<T>(2, 16 * s.ue);
  filter_transform(w, U, s.o, s.c, s.ue);
  const std::int64_t blocks = (s.tiles + s.kb - 1) / s.kb;
#pragma omp parallel for schedule(dynamic, 1) if (blocks > 1)
  for (std::int64_t b = 0; b < blocks; ++b) {
    const std::int64_t t0 = b * s.kb, nt = std::min(s.kb, s.tiles - t0);
    T* v = block_scratch<T>(0, 16 * s.ve);
    T* m = block_scratch<T>(1, 16 * s.me);
    Run runs[kMaxBlock];  // a block has at most one run per tile
    const std::int64_t nruns = tile_runs(s, t0, nt, runs);
    input_transform(x, v, s, runs, nruns);
    for (int e = 0; e < 16; ++e) {
      gemm(false, false, s.o, nt, s.c, T(1), U + e * s.ue, s.c, v + e * s.ve, s.kb, T(0), m + e * s.me, s.kb);
    }
    output_transform(m, out, s, runs, nruns);
  }
}

void conv2d_winograd_forward(const py::array& x, const py::array& w, py::array out, std::int64_t pt,
                             std::int64_t pl) {
  constexpr const char* fn = "conv2d_winograd_forward";
  const std::string f(fn);
  const DType dt = get_dtype(x, fn, "x");
  check_same_dtype(w, x, fn, "w", "x");
  check_same_dtype(out, x, fn, "out", "x");
  check_contiguous(x, fn, "x");
  check_contiguous(w, fn, "w");
  check_inplace(out, fn, "out");
  if (!blas_ready()) throw std::runtime_error(f + ": no BLAS is bound (flow.backends.cpu.threads binds NumPy's)");
  if (x.ndim() != 4) throw py::value_error(f + ": 'x' must be 4-d (N, C, H, W)");
  if (w.ndim() != 4 || w.shape(2) != 3 || w.shape(3) != 3) {
    throw py::value_error(f + ": 'w' must be (O, C, 3, 3)");
  }
  if (w.shape(1) != x.shape(1)) {
    throw py::value_error(f + ": 'w' has " + std::to_string(w.shape(1)) + " input channels, 'x' has " +
                          std::to_string(x.shape(1)));
  }
  if (out.ndim() != 4 || out.shape(0) != x.shape(0) || out.shape(1) != w.shape(0)) {
    throw py::value_error(f + ": 'out' must be 4-d (N, O, Ho, Wo) with N of 'x' and O of 'w'");
  }
  WinoShape s{x.shape(0), x.shape(1), x.shape(2), x.shape(3), w.shape(0), out.shape(2), out.shape(3), pt, pl,
              0, 0, 0, 0, 0, 0, 0};
  s.th = (s.ho + 1) / 2;
  s.tw = (s.wo + 1) / 2;
  s.tiles = s.n * s.th * s.tw;
  s.kb = tiles_per_block(s.c, s.o);
  s.ue = s.o * s.c + kPad;
  s.ve = s.c * s.kb + kPad;
  s.me = s.o * s.kb + kPad;
  if (out.size() == 0) return;
  if (s.c == 0) {  // a sum over no channels
    std::fill(mptr<char>(out), mptr<char>(out) + out.nbytes(), char(0));
    return;
  }
  py::gil_scoped_release nogil;
  BlasSerial serial;
  if (dt == DType::F32) {
    winograd_impl<float>(cptr<float>(x), cptr<float>(w), mptr<float>(out), s);
  } else {
    winograd_impl<double>(cptr<double>(x), cptr<double>(w), mptr<double>(out), s);
  }
}

}  // namespace

void register_winograd(py::module_& m) {
  m.def("conv2d_winograd_forward", &conv2d_winograd_forward, py::arg("x"), py::arg("w"), py::arg("out"),
        py::arg("pt"), py::arg("pl"),
        "out (N, O, Ho, Wo) = conv2d of x (N, C, H, W) with the 3x3 w (O, C, 3, 3), stride 1, top / left "
        "padding pt / pl (bottom / right follow from out's size), by Winograd F(2x2, 3x3); no bias.");
}

}  // namespace flow_native
