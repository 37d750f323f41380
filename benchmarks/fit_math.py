"""Re-derive the polynomial coefficients of the Triton printer's sin, cos, erf and erfc.

[Note: our own sin and erf] in stages/04_inductor/inductor/codegen/triton_math.py. Each fit is a
least-squares fit whose weights are pushed toward the points of largest error until it is
close to the minimax polynomial (iteratively reweighted least squares), then evaluated
with float32 coefficients and float32 Horner steps to report the error a kernel will see.
Run: ``python benchmarks/fit_math.py`` (NumPy only, a few seconds).
"""

from __future__ import annotations

import math

import numpy as np


def reweighted_fit(columns: np.ndarray, target: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """Coefficients c minimising about max |scale * (columns @ c - target)|."""
    weights = scale.copy()
    for _ in range(100):
        coef, *_ = np.linalg.lstsq(columns * weights[:, None], target * weights, rcond=None)
        error = np.abs((columns @ coef - target) * scale)
        weights = weights * np.sqrt(error / error.max() + 1e-3)
    return coef


def horner32(coefficients: list[float], v: np.ndarray) -> np.ndarray:
    """coefficients[0] * v**n + ... + coefficients[-1], in float32 (highest first)."""
    out = np.full_like(v, np.float32(coefficients[0]))
    for c in coefficients[1:]:
        out = (out * v + np.float32(c)).astype(np.float32)
    return out


def fit_sin(terms: int = 4) -> None:
    """sin(r) = r + r**3 * q(r**2) on |r| <= pi/2, relative error; ``q`` has ``terms``
    coefficients (4: degree 9, float32's accuracy; 3: degree 7, for 16-bit stores)."""
    u = np.linspace(1e-8, (math.pi / 2) ** 2, 20001)
    r = np.sqrt(u)
    columns = np.vander(u, terms, increasing=True) * (r ** 3)[:, None]
    coef = reweighted_fit(columns, np.sin(r) - r, 1 / np.sin(r))
    q = [float(np.float32(c)) for c in coef[::-1]]
    r32 = np.linspace(-math.pi / 2, math.pi / 2, 200001).astype(np.float32)
    u32 = r32 * r32
    s = r32 + (r32 * u32) * horner32(q, u32)
    want = np.sin(r32.astype(np.float64))
    nonzero = want != 0
    print("sin q (highest first):", q)
    print("  max relative error, float32 evaluation:",
          np.max(np.abs(s - want)[nonzero] / np.abs(want[nonzero])))


def fit_erf() -> None:
    """erf(t) = 1 - 2**-p(t) on [0.75, 4], p(0) = 0, error scaled by erfc (what the result
    sees); and erf(x) = x * s(x**2) on |x| < 0.75, relative error."""
    t = np.linspace(1e-6, 4, 40001)
    erfc = np.array([math.erfc(v) for v in t])
    coef = reweighted_fit(np.vander(t, 8, increasing=True)[:, 1:], -np.log2(erfc), erfc)
    p = [float(np.float32(c)) for c in coef[::-1]]
    t32 = t.astype(np.float32)
    far = 1 - np.exp2(-(t32 * horner32(p, t32)).astype(np.float64))
    want = np.array([math.erf(v) for v in t])
    print("erf p/t (highest first):", p)
    print("  max absolute error, float32 evaluation:", np.max(np.abs(far - want)))
    u = np.linspace(1e-10, 0.75 ** 2, 20001)
    x = np.sqrt(u)
    target = np.array([math.erf(v) for v in x]) / x
    coef = reweighted_fit(np.vander(u, 5, increasing=True), target, 1 / target)
    s = [float(np.float32(c)) for c in coef[::-1]]
    x32 = x.astype(np.float32)
    near = x32 * horner32(s, x32 * x32)
    print("erf s (highest first):", s)
    print("  max relative error, float32 evaluation:",
          np.max(np.abs(near - target * x) / (target * x)))


def fit_erfc_narrow() -> None:
    """erfc(t) = 2**-p(t) on [0, 10], p(0) = 0, relative error (kernels storing 16-bit
    floats; past 10 erfc is below float32's smallest normal number)."""
    t = np.linspace(1e-7, 10, 40001)
    log2_erfc = np.array([math.log2(math.erfc(v)) if v < 9 else
                          # math.erfc underflows its own precision out there: the
                          # asymptotic series, to 1e-9 relative at 9
                          math.log2(math.exp(-v * v) / (v * math.sqrt(math.pi))
                                    * (1 - 0.5 / v**2 + 0.75 / v**4 - 1.875 / v**6))
                          for v in t])
    coef = reweighted_fit(np.vander(t, 10, increasing=True)[:, 1:], -log2_erfc,
                          np.ones_like(t))
    p = [float(np.float32(c)) for c in coef[::-1]]
    t32 = t.astype(np.float32)
    p32 = (t32 * horner32(p, t32)).astype(np.float64)
    print("erfc (16-bit outputs) p/t (highest first):", p)
    print("  max relative error, float32 evaluation:",
          np.max(np.abs(np.exp2(-(p32 + log2_erfc)) - 1)))


if __name__ == "__main__":
    fit_sin()
    fit_sin(terms=3)
    fit_erf()
    fit_erfc_narrow()
