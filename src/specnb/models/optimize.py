"""Least squares without scipy: multi-start Nelder-Mead over log-parameters, and the
multiplicative uncertainty of each fitted term from the fit's Jacobian."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

__all__ = ["nelder_mead", "fit_least_squares", "uncertainty_factors"]


def nelder_mead(f: Callable[[np.ndarray], float], x0: np.ndarray, step: float = 0.5,
                 iters: int = 2000, tol: float = 1e-12) -> tuple[np.ndarray, float]:
    """Plain Nelder-Mead (scipy is not a dependency); robust to the kink of a hard roofline."""
    n = x0.size
    pts = [x0.astype(float)] + [x0 + step * np.eye(n)[i] for i in range(n)]
    vals = [f(p) for p in pts]
    for _ in range(iters):
        order = np.argsort(vals)
        pts, vals = [pts[i] for i in order], [vals[i] for i in order]
        if abs(vals[-1] - vals[0]) <= tol * (1.0 + abs(vals[0])) and np.max(np.abs(np.array(pts) - pts[0])) < 1e-9:
            break
        centroid = np.mean(pts[:-1], axis=0)
        xr = centroid + (centroid - pts[-1])
        fr = f(xr)
        if fr < vals[0]:
            xe = centroid + 2.0 * (centroid - pts[-1])
            fe = f(xe)
            pts[-1], vals[-1] = (xe, fe) if fe < fr else (xr, fr)
        elif fr < vals[-2]:
            pts[-1], vals[-1] = xr, fr
        else:
            xc = centroid + 0.5 * (pts[-1] - centroid) if fr >= vals[-1] else centroid + 0.5 * (xr - centroid)
            fc = f(xc)
            if fc < min(fr, vals[-1]):
                pts[-1], vals[-1] = xc, fc
            else:  # shrink towards the best point
                pts = [pts[0]] + [pts[0] + 0.5 * (p - pts[0]) for p in pts[1:]]
                vals = [vals[0]] + [f(p) for p in pts[1:]]
    best = int(np.argmin(vals))
    return pts[best], float(vals[best])


def fit_least_squares(residuals: Callable[[np.ndarray], np.ndarray], starts: Sequence[np.ndarray]) -> np.ndarray:
    """Least squares over log-parameters: multi-start Nelder-Mead, then a polish from the best."""
    def sse(x: np.ndarray) -> float:
        r = residuals(x)
        return float(r @ r) if np.all(np.isfinite(r)) else math.inf

    best = min((nelder_mead(sse, s) for s in starts), key=lambda t: t[1])
    x, _ = nelder_mead(sse, best[0], step=0.05)
    return x


def uncertainty_factors(residuals: Callable[[np.ndarray], np.ndarray], x: np.ndarray, names: Sequence[str]) -> dict[str, float]:
    """One-sigma multiplicative factors exp(sd of log-parameter) from a finite-difference Jacobian."""
    r = residuals(x)
    n, p = r.size, x.size
    if n <= p:
        return dict.fromkeys(names, math.inf)
    h = 1e-4
    jac = np.column_stack([(residuals(x + h * e) - residuals(x - h * e)) / (2 * h) for e in np.eye(p)])
    s2 = max(float(r @ r) / (n - p), 1e-12)
    sd = np.full(p, np.inf)
    # a term no point responds to (a hard roofline's unused side) cannot be fitted; the rest are
    # fitted jointly, and if they still only act together (e.g. as a sum) none of them is known
    live = [i for i in range(p) if np.linalg.norm(jac[:, i]) > 1e-9]
    if live:
        sub = jac[:, live].T @ jac[:, live]
        if np.linalg.cond(sub) < 1e12:
            sd[live] = np.sqrt(np.clip(np.diag(np.linalg.inv(sub)) * s2, 0.0, None))
    out: dict[str, float] = {}
    for name, v in zip(names, sd, strict=True):
        out[name] = float(math.exp(v)) if v < 50 else math.inf
    return out
