// im2col / col2im for 2-d convolution of C-contiguous NCHW float32 / float64 arrays.
//
// The column matrix of a batch chunk of n images is (C * kh * kw, n * Ho * Wo): row
// (c * kh + i) * kw + j holds, for every image and output pixel, the input value kernel tap (i, j)
// of channel c reads (zero where the tap falls in the padding). Images sit next to each other
// along the columns, so one GEMM with the (O, C * kh * kw) weight covers the whole chunk.
//
// Padding, stride and dilation are applied while copying: no padded copy of the input is made.
// For each kernel tap the valid output columns of a row form one interval [lo, hi) (computed once
// per tap), so the inner loops are branch-free copies (memcpy at stride 1) between zero-filled
// edges. Negative padding (cropping) falls out of the same arithmetic.
//
// col2im is the adjoint: it adds every column entry back into the input position it was read
// from. Work is parallel over (image, channel) planes: im2col writes distinct column segments and
// col2im distinct input planes per plane, so threads never write the same memory.
#include "common.h"
#include "blas.h"
#include "kernels.h"

namespace flow_native {
namespace {

struct ConvGeom {
  std::int64_t n, c, h, w;        // input chunk
  std::int64_t kh, kw;            // kernel
  std::int64_t sh, sw, pt, pl;    // stride, top / left padding
  std::int64_t dh, dw, ho, wo;    // dilation, output size
};

// floor(a / b) for b > 0 and any sign of a.
inline std::int64_t floor_div(std::int64_t a, std::int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

// [lo, hi): the output indices o with 0 <= o * s + off < size, clipped to [0, out).
inline void valid_range(std::int64_t off, std::int64_t s, std::int64_t size, std::int64_t out, std::int64_t* lo,
                        std::int64_t* hi) {
  std::int64_t a = floor_div(-off + s - 1, s);  // ceil(-off / s)
  std::int64_t b = floor_div(size - off + s - 1, s);
  a = std::max<std::int64_t>(0, a);
  b = std::min<std::int64_t>(out, b);
  *lo = a;
  *hi = std::max(a, b);
}

bool parallel_over(const ConvGeom& g) {
  return g.n * g.c > 1 && g.n * g.c * g.kh * g.kw * g.ho * g.wo >= kParallelGrain;
}

template <typename T>
void im2col_impl(const T* FLOW_RESTRICT x, T* FLOW_RESTRICT cols, ConvGeom g, bool par) {
  const std::int64_t P = g.ho * g.wo, ldc = g.n * P, planes = g.n * g.c;
#pragma omp parallel for schedule(static) if (par && parallel_over(g))
  for (std::int64_t nc = 0; nc < planes; ++nc) {
    const std::int64_t img = nc / g.c, ch = nc % g.c;
    const T* plane = x + nc * g.h * g.w;
    for (std::int64_t i = 0; i < g.kh; ++i) {
      std::int64_t oh_lo, oh_hi;
      valid_range(i * g.dh - g.pt, g.sh, g.h, g.ho, &oh_lo, &oh_hi);
      for (std::int64_t j = 0; j < g.kw; ++j) {
        const std::int64_t off_w = j * g.dw - g.pl;
        std::int64_t ow_lo, ow_hi;
        valid_range(off_w, g.sw, g.w, g.wo, &ow_lo, &ow_hi);
        T* row = cols + ((ch * g.kh + i) * g.kw + j) * ldc + img * P;
        std::fill(row, row + oh_lo * g.wo, T(0));
        for (std::int64_t oh = oh_lo; oh < oh_hi; ++oh) {
          T* dst = row + oh * g.wo;
          // src[ow * s + off_w] is in the row for ow in [ow_lo, ow_hi)
          const T* src = plane + (oh * g.sh + i * g.dh - g.pt) * g.w;
          // plain loops, not memcpy / fill calls: rows are often short (4-32 pixels in ResNet layers)
          for (std::int64_t ow = 0; ow < ow_lo; ++ow) dst[ow] = T(0);
          if (g.sw == 1) {
            FLOW_SIMD
            for (std::int64_t ow = ow_lo; ow < ow_hi; ++ow) dst[ow] = src[ow + off_w];
          } else {
            const std::int64_t s = g.sw;
            FLOW_SIMD
            for (std::int64_t ow = ow_lo; ow < ow_hi; ++ow) dst[ow] = src[ow * s + off_w];
          }
          for (std::int64_t ow = ow_hi; ow < g.wo; ++ow) dst[ow] = T(0);
        }
        std::fill(row + oh_hi * g.wo, row + P, T(0));
      }
    }
  }
}

template <typename T>
void col2im_impl(const T* FLOW_RESTRICT cols, T* FLOW_RESTRICT dx, ConvGeom g, bool par) {
  const std::int64_t P = g.ho * g.wo, ldc = g.n * P, planes = g.n * g.c;
#pragma omp parallel for schedule(static) if (par && parallel_over(g))
  for (std::int64_t nc = 0; nc < planes; ++nc) {
    const std::int64_t img = nc / g.c, ch = nc % g.c;
    T* plane = dx + nc * g.h * g.w;
    for (std::int64_t i = 0; i < g.kh; ++i) {
      std::int64_t oh_lo, oh_hi;
      valid_range(i * g.dh - g.pt, g.sh, g.h, g.ho, &oh_lo, &oh_hi);
      for (std::int64_t j = 0; j < g.kw; ++j) {
        const std::int64_t off_w = j * g.dw - g.pl;
        std::int64_t ow_lo, ow_hi;
        valid_range(off_w, g.sw, g.w, g.wo, &ow_lo, &ow_hi);
        const T* row = cols + ((ch * g.kh + i) * g.kw + j) * ldc + img * P;
        for (std::int64_t oh = oh_lo; oh < oh_hi; ++oh) {
          const T* src = row + oh * g.wo;
          T* dst = plane + (oh * g.sh + i * g.dh - g.pt) * g.w;
          if (g.sw == 1) {
            FLOW_SIMD
            for (std::int64_t ow = ow_lo; ow < ow_hi; ++ow) dst[ow + off_w] += src[ow];
          } else {
            // distinct ow hit distinct dst[ow * s + off_w]: no dependence between iterations
            const std::int64_t s = g.sw;
            FLOW_SIMD
            for (std::int64_t ow = ow_lo; ow < ow_hi; ++ow) dst[ow * s + off_w] += src[ow];
          }
        }
      }
    }
  }
}

ConvGeom geometry(const char* fn, const py::array& img, const py::array& cols, std::int64_t kh, std::int64_t kw,
                  std::int64_t sh, std::int64_t sw, std::int64_t pt, std::int64_t pl, std::int64_t dh,
                  std::int64_t dw, std::int64_t ho, std::int64_t wo, const char* img_name) {
  const std::string f(fn);
  if (img.ndim() != 4) throw py::value_error(f + ": '" + img_name + "' must be 4-d (N, C, H, W)");
  if (cols.ndim() != 2) throw py::value_error(f + ": 'cols' must be 2-d (C*kh*kw, N*Ho*Wo)");
  if (kh < 1 || kw < 1) throw py::value_error(f + ": kernel size must be >= 1");
  if (sh < 1 || sw < 1) throw py::value_error(f + ": stride must be >= 1");
  if (dh < 1 || dw < 1) throw py::value_error(f + ": dilation must be >= 1");
  if (ho < 0 || wo < 0) throw py::value_error(f + ": output size must be >= 0");
  ConvGeom g{img.shape(0), img.shape(1), img.shape(2), img.shape(3), kh, kw, sh, sw, pt, pl, dh, dw, ho, wo};
  const std::int64_t rows = g.c * kh * kw, ncols = g.n * ho * wo;
  if (cols.shape(0) != rows || cols.shape(1) != ncols) {
    throw py::value_error(f + ": 'cols' must have shape (" + std::to_string(rows) + ", " + std::to_string(ncols) +
                          ") for this input and kernel, got (" + std::to_string(cols.shape(0)) + ", " +
                          std::to_string(cols.shape(1)) + ")");
  }
  return g;
}

void im2col(const py::array& x, py::array cols, std::int64_t kh, std::int64_t kw, std::int64_t sh, std::int64_t sw,
            std::int64_t pt, std::int64_t pl, std::int64_t dh, std::int64_t dw, std::int64_t ho, std::int64_t wo) {
  constexpr const char* fn = "im2col";
  const DType dt = get_dtype(x, fn, "x");
  get_dtype(cols, fn, "cols");
  check_same_dtype(cols, x, fn, "cols", "x");
  check_contiguous(x, fn, "x");
  check_inplace(cols, fn, "cols");
  const ConvGeom g = geometry(fn, x, cols, kh, kw, sh, sw, pt, pl, dh, dw, ho, wo, "x");
  MaybeReleaseGil nogil(cols.size());
  if (dt == DType::F32) {
    im2col_impl<float>(cptr<float>(x), mptr<float>(cols), g, true);
  } else {
    im2col_impl<double>(cptr<double>(x), mptr<double>(cols), g, true);
  }
}

void col2im(const py::array& cols, py::array dx, std::int64_t kh, std::int64_t kw, std::int64_t sh, std::int64_t sw,
            std::int64_t pt, std::int64_t pl, std::int64_t dh, std::int64_t dw, std::int64_t ho, std::int64_t wo) {
  constexpr const char* fn = "col2im";
  const DType dt = get_dtype(dx, fn, "dx");
  get_dtype(cols, fn, "cols");
  check_same_dtype(cols, dx, fn, "cols", "dx");
  check_contiguous(cols, fn, "cols");
  check_inplace(dx, fn, "dx");
  const ConvGeom g = geometry(fn, dx, cols, kh, kw, sh, sw, pt, pl, dh, dw, ho, wo, "dx");
  MaybeReleaseGil nogil(cols.size());
  if (dt == DType::F32) {
    col2im_impl<float>(cptr<float>(cols), mptr<float>(dx), g, true);
  } else {
    col2im_impl<double>(cptr<double>(cols), mptr<double>(dx), g, true);
  }
}

// ---------------------------------------------------------------------------------------------
// conv2d with the GEMM inside flow's parallel region.
//
// The batch is cut into tasks of `nb` images (the caller picks nb from the shapes alone, never from
// the thread count) and each OpenMP thread runs whole tasks: columns into its own buffer, then a
// single-threaded GEMM through NumPy's BLAS (BlasSerial keeps that BLAS off its own pool). A task's
// arithmetic is the same whichever thread runs it, so results are identical at any thread count.
// The weight gradient sums over images; it is cut by fixed blocks of its columns (kernel taps)
// instead, so the order of every sum stays the same too. Column blocks, not row blocks: each GEMM
// packs its (O, n * P) left operand again, which is smaller than the (C * kh * kw, n * P) right one.
// All three write into the output array the caller passes (graph memory planning's arena views
// among them, via flow.backends.cpu.conv's out= kernels): no result is allocated here.

constexpr std::int64_t kColBlock = 256;  // weight-gradient columns per task

// This thread's buffer for `slot` (0: columns, 1: GEMM rows), grown as needed and kept: OpenMP's
// threads live on, and a fresh multi-MB buffer per call would fault its pages in each time.
template <typename T>
T* scratch(int slot, std::int64_t size) {
  thread_local std::vector<T> bufs[2];
  std::vector<T>& b = bufs[slot];
  if (static_cast<std::int64_t>(b.size()) < size) b.resize(size);
  return b.data();
}

struct ConvShape {
  ConvGeom g;  // g.n: the whole batch
  std::int64_t o, k, p, img, nb;
};

// (n, O, P) image-major rows at src  <->  (O, n * P) GEMM rows at dst (to_gemm) or back.
template <typename T>
void regroup(const T* src, T* dst, std::int64_t n, std::int64_t o, std::int64_t p, bool to_gemm) {
  for (std::int64_t i = 0; i < n; ++i) {
    for (std::int64_t r = 0; r < o; ++r) {
      const std::int64_t a = (i * o + r) * p, b = r * n * p + i * p;
      if (to_gemm) {
        std::copy(src + a, src + a + p, dst + b);
      } else {
        std::copy(src + b, src + b + p, dst + a);
      }
    }
  }
}

template <typename T>
void conv_forward_impl(const T* x, const T* w, T* out, const ConvShape& s) {
  const ConvGeom& g = s.g;
  const std::int64_t tasks = (g.n + s.nb - 1) / s.nb;
  const bool identity = g.kh == 1 && g.kw == 1 && g.sh == 1 && g.sw == 1 && g.pt == 0 && g.pl == 0 &&
                        g.ho == g.h && g.wo == g.w;
#pragma omp parallel for schedule(dynamic, 1) if (tasks > 1)
  for (std::int64_t t = 0; t < tasks; ++t) {
    const std::int64_t i0 = t * s.nb, n = std::min(s.nb, g.n - i0), np = n * s.p;
    ConvGeom c = g;
    c.n = n;
    const T* cols = x + i0 * s.img;  // a 1x1 unpadded kernel on one image reads it in place
    if (!(identity && n == 1)) {
      T* buf = scratch<T>(0, s.k * np);
      im2col_impl(x + i0 * s.img, buf, c, false);
      cols = buf;
    }
    T* dst = out + i0 * s.o * s.p;
    if (n == 1) {
      gemm(false, false, s.o, np, s.k, T(1), w, s.k, cols, np, T(0), dst, np);
    } else {
      T* res = scratch<T>(1, s.o * np);
      gemm(false, false, s.o, np, s.k, T(1), w, s.k, cols, np, T(0), res, np);
      regroup(res, dst, n, s.o, s.p, false);
    }
  }
}

// zero: dx is not zeroed yet (an out= buffer); each task clears its own images just before adding
// into them, so the clearing is parallel and the images are still in cache for col2im.
template <typename T>
void conv_backward_input_impl(const T* gout, const T* w, T* dx, const ConvShape& s, bool zero) {
  const ConvGeom& g = s.g;
  const std::int64_t tasks = (g.n + s.nb - 1) / s.nb;
#pragma omp parallel for schedule(dynamic, 1) if (tasks > 1)
  for (std::int64_t t = 0; t < tasks; ++t) {
    const std::int64_t i0 = t * s.nb, n = std::min(s.nb, g.n - i0), np = n * s.p;
    ConvGeom c = g;
    c.n = n;
    const T* rows = gout + i0 * s.o * s.p;  // one image's gradient is already (O, P)
    if (n > 1) {
      T* buf = scratch<T>(1, s.o * np);
      regroup(rows, buf, n, s.o, s.p, true);
      rows = buf;
    }
    T* dcols = scratch<T>(0, s.k * np);
    gemm(true, false, s.k, np, s.o, T(1), w, s.k, rows, np, T(0), dcols, np);
    if (zero) std::fill(dx + i0 * s.img, dx + (i0 + n) * s.img, T(0));
    col2im_impl(dcols, dx + i0 * s.img, c, false);  // tasks own distinct images of dx
  }
}

template <typename T>
void conv_backward_weight_impl(const T* gout, const T* x, T* dw, const ConvShape& s) {
  const ConvGeom& g = s.g;
  const std::int64_t blocks = (s.k + kColBlock - 1) / kColBlock;
  for (std::int64_t i0 = 0; i0 < g.n; i0 += s.nb) {
    const std::int64_t n = std::min(s.nb, g.n - i0), np = n * s.p;
    ConvGeom c = g;
    c.n = n;
    // one chunk's columns and rows, shared by the threads below: the calling thread's buffers
    T* cols = scratch<T>(0, s.k * np);
    im2col_impl(x + i0 * s.img, cols, c, true);
    const T* r = gout + i0 * s.o * s.p;
    if (n > 1) {
      T* rows = scratch<T>(1, s.o * np);
      regroup(r, rows, n, s.o, s.p, true);
      r = rows;
    }
    const T beta = i0 == 0 ? T(0) : T(1);  // the first chunk writes, later ones add
#pragma omp parallel for schedule(dynamic, 1) if (blocks > 1 && s.o * s.k * np >= kParallelGrain)
    for (std::int64_t b = 0; b < blocks; ++b) {
      const std::int64_t k0 = b * kColBlock, m = std::min(kColBlock, s.k - k0);
      gemm(false, true, s.o, m, np, T(1), r, np, cols + k0 * np, np, beta, dw + k0, s.k);
    }
  }
}

// Argument checks shared by the three entry points: x-like (N, C, H, W), the (O, K) weight matrix,
// the (N, O, Ho * Wo) output-like array; all C-contiguous of one float dtype.
ConvShape conv_shape(const char* fn, const py::array& img, const py::array& w, const py::array& out, std::int64_t kh,
                     std::int64_t kw, std::int64_t sh, std::int64_t sw, std::int64_t pt, std::int64_t pl,
                     std::int64_t dh, std::int64_t dw, std::int64_t ho, std::int64_t wo, std::int64_t nb) {
  const std::string f(fn);
  if (!blas_ready()) throw std::runtime_error(f + ": no BLAS is bound (flow.backends.cpu.threads binds NumPy's)");
  if (img.ndim() != 4) throw py::value_error(f + ": the image array must be 4-d (N, C, H, W)");
  if (w.ndim() != 2) throw py::value_error(f + ": 'w' must be 2-d (O, C*kh*kw)");
  if (out.ndim() != 3) throw py::value_error(f + ": the output-like array must be 3-d (N, O, Ho*Wo)");
  if (kh < 1 || kw < 1 || sh < 1 || sw < 1 || dh < 1 || dw < 1) {
    throw py::value_error(f + ": kernel size, stride and dilation must be >= 1");
  }
  if (ho < 0 || wo < 0) throw py::value_error(f + ": output size must be >= 0");
  if (nb < 1) throw py::value_error(f + ": images per task must be >= 1, got " + std::to_string(nb));
  ConvShape s{{img.shape(0), img.shape(1), img.shape(2), img.shape(3), kh, kw, sh, sw, pt, pl, dh, dw, ho, wo},
              w.shape(0), img.shape(1) * kh * kw, ho * wo, img.shape(1) * img.shape(2) * img.shape(3), nb};
  if (w.shape(1) != s.k) {
    throw py::value_error(f + ": 'w' must have " + std::to_string(s.k) + " columns, got " +
                          std::to_string(w.shape(1)));
  }
  if (out.shape(0) != s.g.n || out.shape(1) != s.o || out.shape(2) != s.p) {
    throw py::value_error(f + ": the output-like array must have shape (" + std::to_string(s.g.n) + ", " +
                          std::to_string(s.o) + ", " + std::to_string(s.p) + ")");
  }
  return s;
}

template <typename F>
void dispatch(DType dt, F&& f) {
  if (dt == DType::F32) {
    f(float{});
  } else {
    f(double{});
  }
}

void conv2d_gemm_forward(const py::array& x, const py::array& w, py::array out, std::int64_t kh, std::int64_t kw,
                         std::int64_t sh, std::int64_t sw, std::int64_t pt, std::int64_t pl, std::int64_t dh,
                         std::int64_t dw, std::int64_t ho, std::int64_t wo, std::int64_t nb) {
  constexpr const char* fn = "conv2d_gemm_forward";
  const DType dt = get_dtype(x, fn, "x");
  check_same_dtype(w, x, fn, "w", "x");
  check_same_dtype(out, x, fn, "out", "x");
  check_contiguous(x, fn, "x");
  check_contiguous(w, fn, "w");
  check_inplace(out, fn, "out");
  const ConvShape s = conv_shape(fn, x, w, out, kh, kw, sh, sw, pt, pl, dh, dw, ho, wo, nb);
  if (out.size() == 0) return;
  py::gil_scoped_release nogil;
  BlasSerial serial;
  dispatch(dt, [&](auto t) {
    using T = decltype(t);
    conv_forward_impl<T>(cptr<T>(x), cptr<T>(w), mptr<T>(out), s);
  });
}

void conv2d_gemm_backward_input(const py::array& gout, const py::array& w, py::array dx, std::int64_t kh,
                                std::int64_t kw, std::int64_t sh, std::int64_t sw, std::int64_t pt, std::int64_t pl,
                                std::int64_t dh, std::int64_t dw, std::int64_t ho, std::int64_t wo, std::int64_t nb,
                                bool zero) {
  constexpr const char* fn = "conv2d_gemm_backward_input";
  const DType dt = get_dtype(gout, fn, "grad_out");
  check_same_dtype(w, gout, fn, "w", "grad_out");
  check_same_dtype(dx, gout, fn, "dx", "grad_out");
  check_contiguous(gout, fn, "grad_out");
  check_contiguous(w, fn, "w");
  check_inplace(dx, fn, "dx");
  const ConvShape s = conv_shape(fn, dx, w, gout, kh, kw, sh, sw, pt, pl, dh, dw, ho, wo, nb);
  if (gout.size() == 0 || s.k == 0) {  // nothing to add: dx is all zeros
    if (zero) std::fill(mptr<char>(dx), mptr<char>(dx) + dx.nbytes(), char(0));
    return;
  }
  py::gil_scoped_release nogil;
  BlasSerial serial;
  dispatch(dt, [&](auto t) {
    using T = decltype(t);
    conv_backward_input_impl<T>(cptr<T>(gout), cptr<T>(w), mptr<T>(dx), s, zero);
  });
}

void conv2d_gemm_backward_weight(const py::array& gout, const py::array& x, py::array dweight, std::int64_t kh,
                                 std::int64_t kw, std::int64_t sh, std::int64_t sw, std::int64_t pt, std::int64_t pl,
                                 std::int64_t dh, std::int64_t dw, std::int64_t ho, std::int64_t wo, std::int64_t nb) {
  constexpr const char* fn = "conv2d_gemm_backward_weight";
  const DType dt = get_dtype(x, fn, "x");
  check_same_dtype(gout, x, fn, "grad_out", "x");
  check_same_dtype(dweight, x, fn, "dweight", "x");
  check_contiguous(gout, fn, "grad_out");
  check_contiguous(x, fn, "x");
  check_inplace(dweight, fn, "dweight");
  const ConvShape s = conv_shape(fn, x, dweight, gout, kh, kw, sh, sw, pt, pl, dh, dw, ho, wo, nb);
  if (dweight.size() == 0) return;
  if (gout.size() == 0) {  // an empty batch: the sum over no images
    std::fill(mptr<char>(dweight), mptr<char>(dweight) + dweight.nbytes(), char(0));
    return;
  }
  py::gil_scoped_release nogil;
  BlasSerial serial;
  dispatch(dt, [&](auto t) {
    using T = decltype(t);
    conv_backward_weight_impl<T>(cptr<T>(gout), cptr<T>(x), mptr<T>(dweight), s);
  });
}

void register_conv_gemm(py::module_& m) {
  const char* doc_args = " Geometry as im2col; nb: images per task (fixed by the caller, not by the thread count).";
  m.def("conv2d_gemm_forward", &conv2d_gemm_forward, py::arg("x"), py::arg("w"), py::arg("out"), py::arg("kh"),
        py::arg("kw"), py::arg("sh"), py::arg("sw"), py::arg("pt"), py::arg("pl"), py::arg("dh"), py::arg("dw"),
        py::arg("ho"), py::arg("wo"), py::arg("nb"),
        (std::string("out (N, O, Ho*Wo) = conv2d of x (N, C, H, W) with w (O, C*kh*kw), no bias.") + doc_args)
            .c_str());
  m.def("conv2d_gemm_backward_input", &conv2d_gemm_backward_input, py::arg("grad_out"), py::arg("w"), py::arg("dx"),
        py::arg("kh"), py::arg("kw"), py::arg("sh"), py::arg("sw"), py::arg("pt"), py::arg("pl"), py::arg("dh"),
        py::arg("dw"), py::arg("ho"), py::arg("wo"), py::arg("nb"), py::arg("zero") = false,
        (std::string("Add the input gradient of conv2d into the zeroed dx (N, C, H, W); zero=True: dx is "
                     "any buffer and is overwritten.") +
         doc_args)
            .c_str());
  m.def("conv2d_gemm_backward_weight", &conv2d_gemm_backward_weight, py::arg("grad_out"), py::arg("x"),
        py::arg("dweight"), py::arg("kh"), py::arg("kw"), py::arg("sh"), py::arg("sw"), py::arg("pt"),
        py::arg("pl"), py::arg("dh"), py::arg("dw"), py::arg("ho"), py::arg("wo"), py::arg("nb"),
        (std::string("dweight (O, C*kh*kw) = the weight gradient of conv2d (written, not added).") + doc_args).c_str());
}

}  // namespace

void register_conv(py::module_& m) {
  m.def("im2col", &im2col, py::arg("x"), py::arg("cols"), py::arg("kh"), py::arg("kw"), py::arg("sh"),
        py::arg("sw"), py::arg("pt"), py::arg("pl"), py::arg("dh"), py::arg("dw"), py::arg("ho"), py::arg("wo"),
        "Fill cols (C*kh*kw, N*Ho*Wo) with the conv columns of x (N, C, H, W), padding/stride/dilation fused.");
  m.def("col2im", &col2im, py::arg("cols"), py::arg("dx"), py::arg("kh"), py::arg("kw"), py::arg("sh"),
        py::arg("sw"), py::arg("pt"), py::arg("pl"), py::arg("dh"), py::arg("dw"), py::arg("ho"), py::arg("wo"),
        "Add cols (C*kh*kw, N*Ho*Wo) back into dx (N, C, H, W) at the positions im2col reads (its adjoint).");
  register_conv_gemm(m);
}

}  // namespace flow_native
