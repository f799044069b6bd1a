"""Kernels: the array code layers share, written once for numpy and cupy (im2col/col2im,
scatter-adds, ...), and the place for device- or CPU-specific kernels where a hand kernel pays.

Layers import from here; no layer file holds a kernel of its own.
"""
