"""Code generators: Triton and C++ kernels, and the Python wrapper that launches them.

Chapter: book/docs/inductor.md ("Code generation").
"""
