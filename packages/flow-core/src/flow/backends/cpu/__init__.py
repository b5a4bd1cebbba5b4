"""The CPU backend: NumPy arrays plus native kernels from flow._C."""
