"""The nuclear-norm prox's routes by shape: the SVD, dmlr's Gram route, and two that follow rank(Z).

:func:`dmlr.solvers.prox.prox_nuclear_norm` runs once per APG iteration on one
worker (the solver's), on one BLAS thread, while the other workers wait. On a
W of d x l float64 (d = ``--features``, l labels) whose singular values are
``k`` above the threshold tau (from 10 tau down to 1.2 tau) and the rest below
it (from 0.95 tau down to 0: values just under the threshold, the slow case for iterative methods),
one thread, best of ``--repeats`` calls, it times:

* ``svd``: ``np.linalg.svd`` and the thresholded product (the definition);
* ``gram``: dmlr's route (:func:`~dmlr.solvers.prox.prox_nuclear_norm`): the
  small Gram matrix (l x l, or d x d when W is wide), all its eigenpairs
  (LAPACK's divide and conquer), the thresholded map, or the kept directions'
  factors when at most half are kept;

and two routes whose work would follow rank(Z), measured here and not in dmlr:

* ``subset``: the same, with only the eigenpairs above tau^2 (LAPACK's MRRR,
  ``scipy.linalg.eigh(subset_by_value=...)``);
* ``warm``: a randomized SVD warm-started from the previous prox point's row
  space (subspace iteration with Rayleigh-Ritz, 8 oversampling columns, until
  the kept singular triplets' residuals are 1e-10 of the largest singular
  value), where the previous input was this one plus a relative perturbation
  ``--drift`` (one APG step late in a fit). ``its`` is its number of
  iterations (at most 30; "-" if it did not reach the tolerance). Timed only
  where k + 8 is at most half of min(d, l) ("n/a" elsewhere).

``err`` is the largest entry of the difference to the SVD's result, relative
to its largest entry.
"""

from __future__ import annotations

import numpy as np
import scipy.linalg
from threadpoolctl import threadpool_limits

from benchmarks._common import best_of, parser, tee
from dmlr.solvers.prox import prox_nuclear_norm

OVERSAMPLING = 8
WARM_RTOL = 1e-10
WARM_MAX_ITER = 30


def spectrum_matrix(d: int, l: int, k: int, seed: int = 0) -> np.ndarray:
    """d x l with k singular values from 10 down to 1.2 and the rest from 0.95 down to 0 (tau = 1)."""
    rng = np.random.default_rng(seed)
    r = min(d, l)
    U = np.linalg.qr(rng.standard_normal((d, r)))[0]
    V = np.linalg.qr(rng.standard_normal((l, r)))[0]
    s = np.concatenate([np.linspace(10.0, 1.2, k), np.linspace(0.95, 0.0, r - k)])
    return (U * s) @ V.T


def svd_prox(W: np.ndarray, tau: float) -> np.ndarray:
    U, s, Vt = np.linalg.svd(W, full_matrices=False)
    return (U * np.maximum(s - tau, 0.0)) @ Vt


def subset_prox(W: np.ndarray, tau: float) -> np.ndarray:
    """The Gram route with only the eigenpairs above tau^2, through the kept directions."""
    wide = W.shape[0] < W.shape[1]
    lam, V = scipy.linalg.eigh(W @ W.T if wide else W.T @ W, subset_by_value=(tau * tau, np.inf), driver="evr")
    f = 1.0 - tau / np.sqrt(lam)
    return (V * f) @ (V.T @ W) if wide else ((W @ V) * f) @ V.T


def row_space(Z: np.ndarray, seed: int = 1) -> np.ndarray:
    """An orthonormal basis of Z's row space (l x rank), from Z^T times Gaussian blocks."""
    rng = np.random.default_rng(seed)
    Q = np.zeros((Z.shape[1], 0))
    while Q.shape[1] < Z.shape[1]:
        Y = Z.T @ rng.standard_normal((Z.shape[0], min(16, Z.shape[1] - Q.shape[1])))
        Y -= Q @ (Q.T @ Y)
        q, r = np.linalg.qr(Y)
        keep = np.abs(np.diag(r)) > 1e-9 * max(np.abs(r).max(), 1e-300)
        Q = np.hstack([Q, q[:, keep]])
        if not keep.all():
            break
    return Q


def warm_prox(W: np.ndarray, tau: float, basis: np.ndarray):
    """(the prox point or None, iterations): subspace iteration from ``basis`` plus oversampling."""
    rng = np.random.default_rng(2)
    Q = np.linalg.qr(np.hstack([basis, rng.standard_normal((W.shape[1], OVERSAMPLING))]))[0]
    for it in range(1, WARM_MAX_ITER + 1):
        Ub, s, Vbt = np.linalg.svd(W @ Q, full_matrices=False)
        V = Q @ Vbt.T
        C = W.T @ Ub
        k = int((s > tau).sum())
        residual = np.linalg.norm(C[:, :k] - V[:, :k] * s[:k], axis=0).max() if k else 0.0
        if k < Q.shape[1] - 1 and residual <= WARM_RTOL * s[0]:
            return (Ub[:, :k] * (s[:k] - tau)) @ V[:, :k].T, it
        if k >= Q.shape[1] - 1:  # the block holds no direction below tau: widen it
            C = np.hstack([C, rng.standard_normal((W.shape[1], OVERSAMPLING))])
        Q = np.linalg.qr(C)[0]
    return None, WARM_MAX_ITER


def main(argv=None) -> None:
    p = parser(__doc__, docs="prox_routes")
    p.add_argument("--features", type=int, default=2150)
    p.add_argument("--labels", default="200,500,1000,2000,5000")
    p.add_argument("--kept", default="0.05,0.25,0.9", help="fractions of min(d, l) above the threshold")
    p.add_argument("--drift", type=float, default=1e-4)
    p.add_argument("--repeats", type=int, default=2)
    args = p.parse_args(argv)
    d = args.features
    with tee("prox_routes", args.docs), threadpool_limits(1):
        print(f"d = {d}, one BLAS thread, best of {args.repeats}; ms (err)")
        head = f"{'l':>6} {'k':>6} {'svd':>9} {'gram':>18} {'subset':>18} {'warm':>18} {'its':>4}"
        print(head)
        print("-" * len(head))
        for l in (int(v) for v in args.labels.split(",")):
            for frac in (float(v) for v in args.kept.split(",")):
                k = max(1, int(frac * min(d, l)))
                W = spectrum_matrix(d, l, k)
                rng = np.random.default_rng(3)
                previous = W + args.drift * np.abs(W).max() * rng.standard_normal(W.shape)
                t_svd, Z = best_of(lambda: svd_prox(W, 1.0), args.repeats)
                scale = np.abs(Z).max()
                cells = [f"{t_svd * 1e3:9.1f}"]
                for route in (lambda: prox_nuclear_norm(W, 1.0)[0], lambda: subset_prox(W, 1.0)):
                    t, Zg = best_of(route, args.repeats)
                    cells.append(f"{t * 1e3:9.1f} ({np.abs(Zg - Z).max() / scale:.0e})")
                if 2 * (k + OVERSAMPLING) > min(d, l):  # not low rank: no such route
                    cells.append(f"{'n/a':>18} {'':>4}")
                else:
                    basis = row_space(prox_nuclear_norm(previous, 1.0)[0])
                    t, (Zw, its) = best_of(lambda: warm_prox(W, 1.0, basis), args.repeats)
                    err = "-" if Zw is None else f"{np.abs(Zw - Z).max() / scale:.0e}"
                    cells.append(f"{t * 1e3:9.1f} ({err:>5})")
                    cells.append(f"{its if Zw is not None else '-':>4}")
                print(f"{l:6d} {k:6d} " + " ".join(cells), flush=True)


if __name__ == "__main__":
    main()
