"""Reduction, normalization and column-sum kernels: the reduction half of codegen.

``lower`` turns a group with reductions into a ``ReductionKernel`` (kernel IR plus the row /
column plan); ``schedule`` picks its variant (rows per block, split rows, outer tiles);
``passes``, ``pairs``, ``rows``, ``row_values``, ``blocks``, ``columns``, ``index`` and
``vectors`` plan the passes over a row, the values each keeps, block-level sums, column sums,
index arithmetic and register vectors (rows of any length);
``render`` is the C-style walk that writes them (CUDA and C++ dialects, ``cuda_prelude`` holding
the CUDA block-reduction helpers).
"""
