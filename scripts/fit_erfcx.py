#!/usr/bin/env python3
"""The polynomial behind vitpe's erfc (ops/cpu/vec_math.h, erfc_times_exp): prints its float
coefficients and their error, so the constants in the C++ can be checked and made again.

With t = 1 / (1 + z / 2), z >= 0, the function f(t) = erfcx(z) / t = erfc(z) exp(z^2) / t is
smooth on t in [0, 1] (f(1) = 1, f(0) = 1 / (2 sqrt(pi))), so a polynomial in t fits it well, and
erfc(z) = t f(t) exp(-z^2). GELU's derivative needs exp(-x^2 / 2) = exp(-z^2) with z = |x| / sqrt 2
anyway (the normal density), so Phi and phi share one exponential. (Numerical Recipes' erfcc,
which vitpe used before, fits log f instead and needs an exponential of its own.)

The fit: weighted least squares on Chebyshev nodes, reweighted towards the minimax relative
error, then rounded to float; the error is measured with float Horner evaluation on a dense grid
against mpmath at 30 digits. Tooling only (numpy and mpmath, e.g. the venv of scripts/peers-setup):

  /opt/vitpe-peers/bin/python scripts/fit_erfcx.py [--degree 10]
"""
import argparse

import mpmath as mp
import numpy as np

mp.mp.dps = 30


def f(t):
    t = mp.mpf(float(t))
    if t == 0:
        return 1 / (2 * mp.sqrt(mp.pi))
    z = 2 / t - 2
    return mp.erfc(z) * mp.exp(z * z) / t


def fit(degree, nodes=2000):
    ts = np.array([0.5 + 0.5 * np.cos(np.pi * (k + 0.5) / nodes) for k in range(nodes)])
    u = 2 * ts - 1
    fv = np.array([float(f(t)) for t in ts])
    # Lawson's iteration: each node's weight grows with its relative error, which moves the
    # least-squares fit towards the minimax one; the best iterate is kept.
    w = np.ones_like(fv) / len(fv)
    best, best_err = None, np.inf
    for _ in range(40):
        c = np.polynomial.chebyshev.chebfit(u, fv, degree, w=np.sqrt(w) / fv)
        r = np.abs(np.polynomial.chebyshev.chebval(u, c) - fv) / fv
        if r.max() < best_err:
            best, best_err = c, r.max()
        w = w * r
        w = w / w.sum()
    c = best
    # Chebyshev series in u = 2t - 1 -> monomials in t
    p = np.polynomial.Polynomial(np.polynomial.chebyshev.cheb2poly(c))
    return p(np.polynomial.Polynomial([-1.0, 2.0])).coef.astype(np.float32)


def float_horner(coef, t):
    acc = np.full_like(t, coef[-1])
    for a in coef[-2::-1]:
        acc = (acc * t + a).astype(np.float32)
    return acc


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--degree", type=int, default=10)
    args = ap.parse_args()
    coef = fit(args.degree)
    t = np.linspace(0, 1, 20001).astype(np.float32)
    got = float_horner(coef, t).astype(np.float64)
    want = np.array([float(f(x)) for x in t])
    rel = np.abs(got - want) / want
    print(f"degree {args.degree}: max relative error of f in float: {rel.max():.3g}")
    print("coefficients of t^0 .. t^%d (Horner from the last):" % args.degree)
    for a in coef:
        print(f"  {np.format_float_scientific(a, unique=True, precision=9)}f")


if __name__ == "__main__":
    main()
