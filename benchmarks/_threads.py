"""Imported first by run.py: one BLAS/OpenMP thread unless the environment says otherwise.

The bandwidth floor is a single-threaded numpy scan, and on a small shared machine spinning BLAS threads make
single-query latencies erratic. Set OPENBLAS_NUM_THREADS (or OMP_NUM_THREADS) to measure with more threads.
"""

from __future__ import annotations

import os

for _variable in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_variable, "1")
