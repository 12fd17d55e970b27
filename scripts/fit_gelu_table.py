#!/usr/bin/env python3
"""The table behind vitpe's AVX-512 GELU (ops/cpu/gelu.cpp, gelu_avx512): prints its float
coefficients and their error, so the constants in the C++ can be checked and made again.

GELU(x) = x Phi(x). For a = -|x| in [-7, 0], Phi(a) is cut into 32 intervals of 7/32; on each a
degree-5 polynomial in the offset from the interval's centre fits Phi with the least maximum
relative error (Lawson's reweighted least squares, in double), then its coefficients are rounded
to float. Phi(x) = 1 - Phi(a) for x >= 0, and Phi is taken as 0 below -7 (GELU(-7) is -9e-12).
The kernel picks each lane's six coefficients with vpermt2ps from the 32-entry columns of the
table: a dozen instructions per 16 values, against some 40 for the erfc polynomial and
exponential of cpu::normal_cdf.

The error is measured with float evaluation (the kernel's Horner order) on a dense grid against
math.erfc in double. Tooling only (numpy, e.g. the venv of scripts/peers-setup):

  /opt/vitpe-peers/bin/python scripts/fit_gelu_table.py
"""
import math

import numpy as np

LOW, INTERVALS, DEGREE = -7.0, 32, 5
WIDTH = -LOW / INTERVALS


def phi(x):
    return 0.5 * np.vectorize(math.erfc)(-np.asarray(x, dtype=np.float64) / math.sqrt(2.0))


def fit_interval(i, nodes=300):
    centre = LOW + (i + 0.5) * WIDTH
    u = 0.5 * WIDTH * np.cos(np.pi * (np.arange(nodes) + 0.5) / nodes)
    f = phi(centre + u)
    w = np.ones_like(u) / nodes
    best, best_err = None, np.inf
    for _ in range(40):
        c = np.polynomial.polynomial.polyfit(u, f, DEGREE, w=np.sqrt(w) / f)
        r = np.abs(np.polynomial.polynomial.polyval(u, c) - f) / f
        if r.max() < best_err:
            best, best_err = c, r.max()
        w = w * r + 1e-300
        w = w / w.sum()
    return best.astype(np.float32)


def gelu_float(table, x):
    """The kernel's arithmetic in float."""
    f32 = np.float32
    a = -np.abs(x)
    ac = np.maximum(a, f32(LOW))
    idx = (ac * f32(1 / WIDTH) + f32(-LOW / WIDTH)).astype(np.float32).astype(np.int32)
    idx = np.clip(idx, 0, INTERVALS - 1)
    centre = (idx.astype(f32) * f32(WIDTH) + f32(LOW + 0.5 * WIDTH)).astype(f32)
    u = (ac - centre).astype(f32)
    p = table[DEGREE][idx]
    for d in range(DEGREE - 1, -1, -1):
        p = (p * u + table[d][idx]).astype(f32)
    p[a < LOW] = 0
    cdf = np.where(x >= 0, (f32(1) - p).astype(f32), p)
    return (x * cdf).astype(f32)


def main():
    table = np.array([fit_interval(i) for i in range(INTERVALS)]).T  # [degree + 1, intervals]
    x = np.linspace(-9, 9, 900001).astype(np.float32)
    want = x.astype(np.float64) * phi(x)
    err = np.abs(gelu_float(table, x) - want)
    near = (np.abs(x) <= 5) & (x != 0)
    inside = (x >= LOW) & (x != 0)
    print(f"// relative error of GELU on [-5, 5]: {(err[near] / np.abs(want[near])).max():.2e}; "
          f"on [-7, 7]: {(err[inside] / np.abs(want[inside])).max():.2e}; "
          f"absolute: {err.max():.2e} (the float rounding of x Phi(x) at large |x|)")
    print(f"alignas(64) constexpr float kGeluTable[{DEGREE + 1}][{INTERVALS}] = {{")
    for d in range(DEGREE + 1):
        values = ", ".join(f"{v:.9e}f" for v in table[d])
        print(f"    {{{values}}},")
    print("};")


if __name__ == "__main__":
    main()
