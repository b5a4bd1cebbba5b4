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
void im2col_impl(const T* FLOW_RESTRICT x, T* FLOW_RESTRICT cols, ConvGeom g) {
  const std::int64_t P = g.ho * g.wo, ldc = g.n * P, planes = g.n * g.c;
  MaybeReleaseGil nogil(planes * g.kh * g.kw * P);
#pragma omp parallel for schedule(static) if (parallel_over(g))
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
void col2im_impl(const T* FLOW_RESTRICT cols, T* FLOW_RESTRICT dx, ConvGeom g) {
  const std::int64_t P = g.ho * g.wo, ldc = g.n * P, planes = g.n * g.c;
  MaybeReleaseGil nogil(planes * g.kh * g.kw * P);
#pragma omp parallel for schedule(static) if (parallel_over(g))
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
  if (dt == DType::F32) {
    im2col_impl<float>(cptr<float>(x), mptr<float>(cols), g);
  } else {
    im2col_impl<double>(cptr<double>(x), mptr<double>(cols), g);
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
  if (dt == DType::F32) {
    col2im_impl<float>(cptr<float>(cols), mptr<float>(dx), g);
  } else {
    col2im_impl<double>(cptr<double>(cols), mptr<double>(dx), g);
  }
}

}  // namespace

void register_conv(py::module_& m) {
  m.def("im2col", &im2col, py::arg("x"), py::arg("cols"), py::arg("kh"), py::arg("kw"), py::arg("sh"),
        py::arg("sw"), py::arg("pt"), py::arg("pl"), py::arg("dh"), py::arg("dw"), py::arg("ho"), py::arg("wo"),
        "Fill cols (C*kh*kw, N*Ho*Wo) with the conv columns of x (N, C, H, W), padding/stride/dilation fused.");
  m.def("col2im", &col2im, py::arg("cols"), py::arg("dx"), py::arg("kh"), py::arg("kw"), py::arg("sh"),
        py::arg("sw"), py::arg("pt"), py::arg("pl"), py::arg("dh"), py::arg("dw"), py::arg("ho"), py::arg("wo"),
        "Add cols (C*kh*kw, N*Ho*Wo) back into dx (N, C, H, W) at the positions im2col reads (its adjoint).");
}

}  // namespace flow_native
