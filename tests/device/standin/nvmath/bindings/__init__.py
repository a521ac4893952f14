"""Stand-in for ``nvmath.bindings``: the low-level bindings of the CUDA math libraries (here cuBLAS only)."""
