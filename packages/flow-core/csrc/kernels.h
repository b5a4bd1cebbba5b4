// Registration entry points: each translation unit binds its own kernels.
#pragma once

#include <pybind11/pybind11.h>

namespace flow_native {

void register_softmax(pybind11::module_& m);
void register_elementwise(pybind11::module_& m);
void register_layer_norm(pybind11::module_& m);
void register_optim(pybind11::module_& m);
void register_lowp(pybind11::module_& m);
void register_lowp_gemm(pybind11::module_& m);
void register_batch_norm(pybind11::module_& m);
void register_conv(pybind11::module_& m);
void register_attention(pybind11::module_& m);  // attention.cpp: fused (flash) attention
void register_winograd(pybind11::module_& m);  // winograd.cpp: F(2x2, 3x3) conv2d forward
void register_allocator(pybind11::module_& m);  // allocator.cpp: the caching NumPy memory handler

}  // namespace flow_native
