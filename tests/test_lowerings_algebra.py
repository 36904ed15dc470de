"""FFT, complex numbers and linear algebra against CPU eager (lowering/fft.cc, complex.cc,
linalg_decomp.cc, linalg_misc.cc, aten/linalg_kernels.cc).

Every case runs on the CPU and on pjrt and asserts: no CPU fallback, the lowered schemas ran
(`torch.pjrt.metrics.lowered()`), results within a dtype tolerance. Dtypes: float32, float64,
complex64, complex128 (CPU has no half-precision FFT or LAPACK kernels); batched, non-contiguous and
0-size-batch inputs; gradients through torch.autograd.grad. Factorizations that are unique (Cholesky,
LU with LAPACK's pivots, QR with LAPACK's signs) are compared element by element; eigenvectors are
compared through reconstructions and gauge-invariant functions. Singular and non-positive-definite
inputs raise (or report info) exactly like CPU."""
import pytest
import torch

from helpers import Counters, to_cpu, to_pjrt

F32, F64, C64, C128 = torch.float32, torch.float64, torch.complex64, torch.complex128
ALL = [F32, F64, C64, C128]
REAL = [F32, F64]


@pytest.fixture(autouse=True, scope="module")
def _quiet():
    torch.pjrt.set_fallback_warnings(False)
    yield
    torch.pjrt.set_fallback_warnings(True)


def tol(dtype, scale=1.0):
    if dtype in (F64, C128):
        return dict(rtol=1e-9 * scale, atol=1e-9 * scale)
    return dict(rtol=2e-4 * scale, atol=2e-4 * scale)


def name(dtype):
    return str(dtype).replace("torch.", "")


def rand(*shape, dtype=F32, seed=0):
    g = torch.Generator().manual_seed(seed)
    part = {C64: F32, C128: F64}.get(dtype, dtype)
    x = torch.randn(*shape, generator=g, dtype=part)
    if dtype.is_complex:
        x = torch.complex(x, torch.randn(*shape, generator=g, dtype=part))
    return x


def spd(n, dtype, batch=(), seed=0):
    a = rand(*batch, n, n, dtype=dtype, seed=seed)
    return a @ a.mH + n * torch.eye(n, dtype=dtype)


def well_conditioned(n, dtype, batch=(), seed=0):
    return rand(*batch, n, n, dtype=dtype, seed=seed) + 2 * n ** 0.5 * torch.eye(n, dtype=dtype)


def run(fn, args, schemas, dtype=F32, scale=1.0, compare=True):
    """fn on CPU and on pjrt; asserts no fallback, that `schemas` were lowered, and equal results.
    Returns (cpu, pjrt-on-cpu) results."""
    expected = fn(*args)
    torch.pjrt.metrics.reset()
    actual = to_cpu(fn(*to_pjrt(list(args))))
    fallbacks, lowered = torch.pjrt.metrics.fallbacks(), torch.pjrt.metrics.lowered()
    assert fallbacks == {}, f"fell back to the CPU: {fallbacks}"
    missing = [s for s in schemas if s not in lowered]
    assert not missing, f"not lowered: {missing} (lowered: {sorted(lowered)})"
    if compare:
        torch.testing.assert_close(actual, expected, equal_nan=True, **tol(dtype, scale))
    return expected, actual


def grads(fn, args, schemas, dtype, scale=1.0):
    """torch.autograd.grad of fn (a real scalar) with respect to every arg, CPU vs pjrt."""
    def g(*xs):
        xs = [x.detach().requires_grad_() for x in xs]
        return torch.autograd.grad(fn(*xs), xs)
    return run(g, args, schemas, dtype, scale)


def real_sum(x, seed=1):
    """A real scalar with a nontrivial gradient: sum(Re(x * w)) for a fixed random w."""
    w = rand(*x.shape, dtype=x.dtype, seed=seed).to(x.device)
    return (x * w).real.sum() if x.is_complex() else (x * w).sum()


# ---------------------------------------------------------------------------------------- FFT

FFT_CASES = {
    "fft": (lambda x: torch.fft.fft(x), ["_fft_c2c"]),
    "fft_n_pad": (lambda x: torch.fft.fft(x, n=9, dim=1), ["_fft_c2c"]),
    "fft_n_trunc_ortho": (lambda x: torch.fft.fft(x, n=3, norm="ortho"), ["_fft_c2c"]),
    "ifft_forward": (lambda x: torch.fft.ifft(x, dim=0, norm="forward"), ["_fft_c2c"]),
    "fft2": (lambda x: torch.fft.fft2(x), ["_fft_c2c"]),
    "ifftn_4d": (lambda x: torch.fft.ifftn(x.reshape(2, 1, 3, 6), dim=(0, 1, 2, 3)), ["_fft_c2c"]),
    "fftn_s": (lambda x: torch.fft.fftn(x, s=(4, 8), dim=(0, 2), norm="ortho"), ["_fft_c2c"]),
    "rfft": (lambda x: torch.fft.rfft(x.real if x.is_complex() else x), ["_fft_r2c"]),
    "rfft2_ortho": (lambda x: torch.fft.rfft2(x.real if x.is_complex() else x, norm="ortho"), ["_fft_r2c"]),
    "rfftn_dims": (lambda x: torch.fft.rfftn(x.real if x.is_complex() else x, dim=(2, 0)), ["_fft_r2c"]),
    "ihfft": (lambda x: torch.fft.ihfft(x.real if x.is_complex() else x, n=7), ["_fft_r2c"]),
    "irfft": (lambda x: torch.fft.irfft(x), ["_fft_c2r"]),
    "irfft_n_odd": (lambda x: torch.fft.irfft(x, n=9, norm="ortho"), ["_fft_c2r"]),
    "irfftn": (lambda x: torch.fft.irfftn(x, s=(3, 4, 10)), ["_fft_c2r"]),
    "hfft": (lambda x: torch.fft.hfft(x, dim=0, norm="forward"), ["_fft_c2r"]),
}


@pytest.mark.parametrize("dtype", ALL, ids=name)
def test_fft(dtype):
    """Every case in one graph per dtype (one compile); then a transposed (non-contiguous) input."""
    def all_cases(x):
        return [fn(x) for fn, _ in FFT_CASES.values()]
    # Complex-to-complex transforms of real inputs run as _fft_r2c (onesided=False).
    schemas = ["_fft_c2c", "_fft_r2c", "_fft_c2r"] if dtype.is_complex else ["_fft_r2c", "_fft_c2r"]
    run(all_cases, [rand(2, 3, 6, dtype=dtype)], schemas, dtype, scale=4)
    run(all_cases, [rand(6, 3, 2, dtype=dtype, seed=1).permute(2, 1, 0)], schemas, dtype, scale=4)


def test_fft_empty():
    """An empty transformed dim raises on both (torch's own check). An empty batch is an error of
    CPU eager's MKL backend only ("Inconsistent configuration parameters"); pjrt returns the empty
    result, with the shapes of torch's Meta kernels (what CUDA's cuFFT backend returns too)."""
    x = rand(0, 3, 6, dtype=C64)
    for fn in (lambda x: torch.fft.fft(x, dim=0), lambda x: torch.fft.rfft(x.real, dim=0)):
        with pytest.raises(RuntimeError) as cpu_err:
            fn(x)
        with pytest.raises(RuntimeError) as dev_err:
            to_cpu(fn(x.to("pjrt")))
        assert str(dev_err.value) == str(cpu_err.value)
    with pytest.raises(RuntimeError, match="MKL"):
        torch.fft.fft(x)
    torch.pjrt.metrics.reset()
    out = to_cpu([torch.fft.fft(x.to("pjrt")), torch.fft.rfft(x.real.to("pjrt")), torch.fft.irfft(x.to("pjrt"))])
    assert torch.pjrt.metrics.fallbacks() == {}
    assert [tuple(o.shape) for o in out] == [(0, 3, 6), (0, 3, 4), (0, 3, 10)]
    assert [o.dtype for o in out] == [C64, C64, F32]


def test_fft_helpers():
    x = rand(4, 6, dtype=F64)
    run(lambda x: torch.fft.fftshift(torch.fft.fft(x)), [x], ["_fft_r2c"], F64)


@pytest.mark.parametrize("dtype", [F32, C128], ids=name)
def test_fft_gradients(dtype):
    x = rand(3, 8, dtype=dtype)
    grads(lambda x: real_sum(torch.fft.fft(x, norm="ortho")), [x], ["_fft_c2c"], dtype, scale=4)
    grads(lambda x: real_sum(torch.fft.fft2(x, s=(4, 5))), [x], ["_fft_c2c"], dtype, scale=4)
    xr = x.real if dtype.is_complex else x
    grads(lambda x: real_sum(torch.fft.rfft(x)), [xr], ["_fft_r2c"], dtype, scale=4)
    grads(lambda x: real_sum(torch.fft.rfftn(x, norm="forward")), [xr], ["_fft_r2c"], dtype, scale=4)
    xc = x if dtype.is_complex else rand(3, 8, dtype=C64)
    grads(lambda x: real_sum(torch.fft.irfft(x, n=12)), [xc], ["_fft_c2r"], xc.dtype, scale=4)


# ------------------------------------------------------------------------------------ complex

def test_complex_construction_and_views():
    for part in REAL:
        a, b = rand(3, 4, dtype=part), rand(3, 4, dtype=part, seed=1)
        run(lambda a, b: torch.complex(a, b), [a, b], ["complex"], part)
        run(lambda a, b: torch.polar(a.abs(), b), [a, b], ["polar"], part)
        run(lambda a, b: torch.complex(a.t(), b[:, ::2].repeat(1, 2).t()), [a, b], ["complex"], part)
    for dtype in [C64, C128]:
        z = rand(3, 4, dtype=dtype)
        run(lambda z: torch.view_as_real(z) * 2, [z], ["mul.Tensor"], dtype)
        run(lambda z: torch.view_as_real(z.t()), [z], [], dtype)
        run(lambda z: torch.view_as_complex(torch.view_as_real(z) + 1), [z], ["add.Tensor"], dtype)
        run(lambda z: torch.view_as_complex(torch.view_as_real(z).flip(-1).contiguous()), [z], [], dtype)
        run(lambda z: (z.real, z.imag, z.real * z.imag), [z], ["mul.Tensor"], dtype)

        def write_through(z):
            z = z.clone()
            torch.view_as_real(z)[..., 1] = 5.0
            z.real[0] = -1.0
            return z
        run(write_through, [z], [], dtype)
        run(lambda z: z.conj().resolve_conj(), [z], [], dtype)
        run(lambda z: torch.conj_physical(z[:, 1:]), [z], ["_conj_physical"], dtype)
        run(lambda z: torch.view_as_real(z).view(torch.int32 if dtype == C64 else torch.int64) + 1, [z], [], dtype)


def complex_extremal(dtype):
    """Every pair of extremal real and imaginary parts."""
    part = F32 if dtype == C64 else F64
    v = torch.tensor([float("nan"), float("inf"), -float("inf"), 0.0, -0.0, 1.0, -2.5, 1e-3, 3e30 if dtype == C64 else
                      1e300], dtype=part)
    return torch.complex(v.repeat_interleave(len(v)), v.repeat(len(v)))


@pytest.mark.parametrize("dtype", [C64, C128], ids=name)
def test_complex_elementwise(dtype):
    z = rand(4, 5, dtype=dtype)
    ext = complex_extremal(dtype)
    run(torch.abs, [ext], ["abs"], dtype)
    run(torch.isnan, [ext], ["isnan"], dtype)
    run(lambda z: torch.nan_to_num(z, nan=1.0, posinf=2.0, neginf=-3.0), [ext], ["nan_to_num"], dtype)
    run(torch.angle, [ext], ["angle"], dtype)
    run(torch.sgn, [ext[torch.isfinite(ext.abs())]], ["sgn"], dtype)
    run(torch.sgn, [z], ["sgn"], dtype)
    run(lambda z: (torch.angle(z.t()), z.abs().t()), [z], ["angle", "abs"], dtype)
    run(lambda z: z ** (0.5 + 1j), [z], ["pow.Tensor_Scalar"], dtype, scale=4)
    run(lambda z: torch.vdot(z[0], z[1]), [z], ["vdot"], dtype)
    run(lambda z: torch.vdot(z[:, 0], z[:, 1]), [z], ["vdot"], dtype)


@pytest.mark.parametrize("dtype", [C64, C128, F32], ids=name)
def test_conj_physical_inplace_and_out(dtype):
    z = rand(4, 5, dtype=dtype)
    p = z.to("pjrt")
    assert p.conj_physical_() is p and torch.equal(p.cpu(), z.conj_physical())
    out = torch.empty(4, 5, dtype=dtype, device="pjrt")
    assert torch.conj_physical(z.to("pjrt"), out=out) is out and torch.equal(out.cpu(), z.conj_physical())
    assert not torch.pjrt.metrics.fallbacks().get("aten::conj_physical_")


@pytest.mark.parametrize("dtype", [C64, C128], ids=name)
def test_complex_sinh_cosh_lerp_logsumexp_logaddexp(dtype):
    """Lowerings written for real types that once emitted a real-only abs on complex values (the
    plugin refused to compile the graph)."""
    z = rand(4, 5, dtype=dtype) * 3
    axis = torch.tensor([2, -1, 0, float("inf"), float("nan")], dtype=dtype)  # zero imaginary parts
    run(lambda z, a: (torch.sinh(z), torch.cosh(z), torch.sinh(a), torch.cosh(a)), [z, axis],
        ["sinh", "cosh"], dtype)
    w = rand(4, 5, dtype=dtype, seed=5)
    run(lambda z, w: (torch.lerp(z, 2 * z + 1, 0.3), torch.lerp(z, -z, 0.8), torch.lerp(z, z.flip(0), w)),
        [z, w], ["lerp.Scalar", "lerp.Tensor"], dtype)
    run(lambda z: (torch.logsumexp(z, 1), torch.logsumexp(z, 0, keepdim=True)), [z], ["logsumexp"], dtype)
    inf, nan = float("inf"), float("nan")
    edges = torch.tensor([complex(inf, 1), complex(-inf, 1), complex(nan, 0), complex(inf, 0), complex(inf, 3),
                          complex(-inf, 2), 0j, complex(inf, 0)], dtype=dtype)
    partners = torch.tensor([complex(inf, 2), complex(-inf, 3), complex(1, 1), complex(inf, 1), complex(inf, 0),
                             complex(3, 1), complex(inf, 0), complex(-inf, 0)], dtype=dtype)
    run(lambda z, w, a, b: (torch.logaddexp(z, w), torch.logaddexp(a, b), torch.logaddexp(b, a)),
        [z, w, edges, partners], ["logaddexp"], dtype)


@pytest.mark.parametrize("dtype", REAL, ids=name)
def test_real_angle_sgn(dtype):
    v = torch.tensor([float("nan"), float("inf"), -float("inf"), 0.0, -0.0, 1.0, -2.5], dtype=dtype)
    run(torch.angle, [v], ["angle"], dtype)
    run(torch.sgn, [v], ["sgn"], dtype)
    run(torch.angle, [torch.tensor([-3, 0, 2])], ["angle"], F32)
    run(lambda a, b: torch.vdot(a, b), [v[3:], v[3:].flip(0)], ["vdot"], dtype)


@pytest.mark.parametrize("dtype", [C64, C128], ids=name)
def test_complex_reductions_and_matmul(dtype):
    z = rand(3, 6, dtype=dtype)
    run(lambda z: (torch.var(z, 1), torch.std(z, 0, correction=0)), [z], ["var.correction", "std.correction"], dtype)
    run(lambda z: (torch.var_mean(z, 1), torch.std_mean(z.t(), 1)), [z],
        ["var_mean.correction", "std_mean.correction"], dtype)
    run(lambda z: (torch.linalg.vector_norm(z), torch.linalg.vector_norm(z, 1, dim=1),
                   torch.linalg.vector_norm(z, float("inf"), dim=0), torch.linalg.vector_norm(z, 3.5)), [z],
        ["linalg_vector_norm"], dtype)
    m, v = rand(6, 4, dtype=dtype, seed=2), rand(6, dtype=dtype, seed=3)
    b = rand(3, 4, dtype=dtype, seed=4)
    run(lambda b, z, m: torch.addmm(b, z, m, beta=0.5 - 1j, alpha=2j), [b, z, m], ["addmm"], dtype)
    run(lambda b, z, v: torch.addmv(b[:, 0], z, v, beta=1j, alpha=1 + 1j), [b, z, v], ["addmv"], dtype)
    run(lambda b, z, m: torch.baddbmm(b[None], z[None], m[None], beta=2j, alpha=-1j), [b, z, m], ["baddbmm"], dtype)
    run(lambda z, m: z @ m, [z, m], [], dtype)


@pytest.mark.parametrize("dtype", [C64, C128], ids=name)
def test_complex_gradients(dtype):
    z = rand(3, 4, dtype=dtype)
    grads(lambda z: real_sum(torch.tanh(z)), [z], ["tanh_backward"], dtype)
    grads(lambda z: real_sum(torch.sigmoid(z)), [z], ["sigmoid_backward"], dtype)
    grads(lambda z: z.abs().sum() + torch.angle(z).sum(), [z], ["abs", "sgn"], dtype)
    a, b = rand(3, 4, dtype=F32 if dtype == C64 else F64), rand(3, 4, dtype=F32 if dtype == C64 else F64, seed=5)
    grads(lambda a, b: real_sum(torch.polar(a.abs(), b)), [a, b], ["polar"], dtype)
    grads(lambda a, b: real_sum(torch.complex(a, b)), [a, b], ["complex"], dtype)


# ----------------------------------------------------------------------------- linear algebra

def batches(make, dtype):
    """A batch of matrices and a transposed (non-contiguous) batch. Each test puts all its ops on one
    input into one graph: compiles dominate this file's run time."""
    return [make(3, dtype, (2, 3), 1), make(4, dtype, (2,), 2).mT]


@pytest.mark.parametrize("dtype", ALL, ids=name)
def test_cholesky(dtype):
    def ops(a, b):
        l, u = torch.linalg.cholesky(a), torch.linalg.cholesky(a, upper=True)
        return (l, u, torch.linalg.cholesky_ex(a), torch.cholesky_inverse(l), torch.cholesky_inverse(u, upper=True),
                torch.cholesky_solve(b, l), torch.cholesky_solve(b, u, upper=True))
    for a in batches(spd, dtype):
        b = rand(*a.shape[:-1], 2, dtype=dtype)
        run(ops, [a, b], ["linalg_cholesky_ex", "cholesky_inverse", "_cholesky_solve_helper"], dtype, scale=10)
    run(torch.linalg.cholesky_ex, [spd(3, dtype)[None].expand(0, 3, 3)], ["linalg_cholesky_ex"], dtype)


@pytest.mark.parametrize("dtype", [F64, C64], ids=name)
def test_cholesky_not_positive_definite(dtype):
    a = spd(4, dtype, (5,))
    a[1, 2, 2] = -100           # the leading minor of order 3 is not positive definite
    a[2] = -a[2]                # order 1
    a[3, 3, 3] = 0.5 * a[3, 3, 3] - 100
    a[4, 0, 1] = float("nan")   # the upper triangle is not read: positive definite
    a[4, 2, 1] = float("nan")   # order 3 (LAPACK's NaN check)
    expected, _ = run(lambda a: torch.linalg.cholesky_ex(a).info, [a], ["linalg_cholesky_ex"], dtype)
    assert expected.tolist() == [0, 3, 1, 4, 3]
    run(lambda a: torch.linalg.cholesky_ex(a, upper=True).info, [a.mH], ["linalg_cholesky_ex"], dtype)
    # Where info is 0 the factor is CPU's; elsewhere LAPACK leaves a partial factor and XLA NaNs.
    run(lambda a: torch.linalg.cholesky_ex(a).L[0], [a], ["linalg_cholesky_ex"], dtype)
    for fn in (torch.linalg.cholesky, lambda a: torch.linalg.cholesky(a[1])):
        with pytest.raises(torch.linalg.LinAlgError) as cpu_err:
            fn(a)
        with pytest.raises(torch.linalg.LinAlgError) as dev_err:
            to_cpu(fn(a.to("pjrt")))
        assert str(dev_err.value) == str(cpu_err.value)


@pytest.mark.parametrize("dtype", ALL, ids=name)
def test_triangular_solves(dtype):
    def ops(a, b, bl):
        out = []
        for upper in (False, True):
            out += [torch.linalg.solve_triangular(a, b, upper=upper),
                    torch.linalg.solve_triangular(a, bl, upper=upper, left=False, unitriangular=True),
                    torch.triangular_solve(b, a, upper=upper, transpose=True)]
        return out + [torch.triangular_solve(b, a, unitriangular=True)]
    for a in batches(well_conditioned, dtype):
        b = rand(*a.shape[:-1], 3, dtype=dtype, seed=7)
        bl = rand(*a.shape[:-2], 3, a.shape[-1], dtype=dtype, seed=8)
        run(ops, [a, b, bl], ["linalg_solve_triangular", "triangular_solve"], dtype)


LU_SCHEMAS = ["linalg_lu_factor_ex", "linalg_lu", "lu_unpack"]
SOLVE_SCHEMAS = ["linalg_lu_solve", "_linalg_solve_ex", "linalg_inv_ex", "linalg_lu_factor_ex"]


def lu_ops(a):
    return torch.linalg.lu_factor_ex(a), torch.linalg.lu(a), torch.lu_unpack(*torch.linalg.lu_factor_ex(a)[:2])


def solve_ops(a, b):
    """The _ex forms: the checking ones read info (a sync each); test_singular covers them."""
    lu, piv, _ = torch.linalg.lu_factor_ex(a)
    return (torch.linalg.lu_solve(lu, piv, b), torch.linalg.lu_solve(lu, piv, b.mT, left=False, adjoint=True),
            torch.linalg.solve_ex(a, b), torch.linalg.solve_ex(a, b[..., 0]), torch.linalg.solve_ex(a, b.mT, left=False),
            torch.linalg.inv_ex(a), torch.linalg.det(a), torch.linalg.slogdet(a), torch.logdet(a @ a.mH))


@pytest.mark.parametrize("dtype", ALL, ids=name)
def test_lu_family(dtype):
    # Wide and tall (as 2-D matrices), a batch of square ones.
    run(lambda w, t, s: (lu_ops(w), lu_ops(t), lu_ops(s)),
        [rand(3, 5, dtype=dtype), rand(5, 3, dtype=dtype), rand(2, 4, 4, dtype=dtype).mT], LU_SCHEMAS, dtype, scale=10)
    for a in batches(well_conditioned, dtype) if dtype in (F64, C64) else batches(well_conditioned, dtype)[:1]:
        run(solve_ops, [a, rand(*a.shape[:-1], 2, dtype=dtype)], SOLVE_SCHEMAS, dtype, scale=10)
    # An empty batch, and a batch of 0x0 matrices (det 1, inverse empty).
    for e in (rand(0, 3, 3, dtype=dtype), rand(2, 0, 0, dtype=dtype)):
        run(lambda e: (torch.linalg.inv_ex(e), torch.linalg.det(e), torch.linalg.slogdet(e),
                       torch.linalg.lu_factor_ex(e), torch.linalg.solve_ex(e, e), torch.linalg.cholesky_ex(e),
                       torch.linalg.eigh(e), torch.linalg.qr(e)), [e],
            ["linalg_inv_ex", "linalg_lu_factor_ex", "_linalg_solve_ex", "linalg_cholesky_ex", "_linalg_eigh",
             "linalg_qr"], dtype)


@pytest.mark.parametrize("dtype", [F32, C128], ids=name)
def test_singular(dtype):
    a = rand(3, 4, 4, dtype=dtype)
    a[1, :, 2] = 0  # a zero column: U[2, 2] = 0 exactly
    a[2, 1] = 0     # a zero row: U[3, 3] = 0 exactly
    expected, _ = run(lambda a: (torch.linalg.lu_factor_ex(a), torch.linalg.inv_ex(a).info, torch.linalg.det(a),
                                 torch.linalg.slogdet(a)), [a], ["linalg_lu_factor_ex", "linalg_inv_ex"], dtype,
                      scale=10)
    assert expected[0].info.tolist() == [0, 3, 4]
    assert expected[1].tolist() == [0, 3, 4]
    for fn in (torch.linalg.inv, lambda a: torch.linalg.solve(a, a[..., :1]), torch.linalg.lu_factor):
        with pytest.raises(RuntimeError) as cpu_err:
            fn(a)
        with pytest.raises(cpu_err.type) as dev_err:
            to_cpu(fn(a.to("pjrt")))
        assert str(dev_err.value) == str(cpu_err.value)


@pytest.mark.parametrize("dtype", ALL, ids=name)
def test_qr_householder(dtype):
    def ops(a, tau):
        return (torch.linalg.qr(a), torch.linalg.qr(a, mode="complete"), torch.linalg.qr(a, mode="r")[1],
                torch.linalg.householder_product(a, tau) if a.shape[-2] >= a.shape[-1] else None)
    for a in [rand(2, 5, 3, dtype=dtype), rand(2, 3, 5, dtype=dtype, seed=1), rand(2, 4, 4, dtype=dtype, seed=2).mT]:
        tau = rand(*a.shape[:-2], min(a.shape[-2:]) - 1, dtype=dtype, seed=3)
        run(ops, [a, tau], ["linalg_qr"] + (["linalg_householder_product"] if a.shape[-2] >= a.shape[-1] else []),
            dtype, scale=10)
    run(torch.linalg.qr, [rand(0, 4, 3, dtype=dtype)], ["linalg_qr"], dtype)


@pytest.mark.parametrize("dtype", [F32, torch.float64, torch.complex64, torch.complex128], ids=name)
def test_geqrf_and_ormqr(dtype):
    # geqrf is the Qr custom call's packed result (LAPACK's convention); ormqr multiplies by the
    # full square Q of those reflectors, from either side, conjugate-transposed or not.
    for a in [rand(2, 5, 3, dtype=dtype), rand(2, 3, 5, dtype=dtype, seed=1), rand(4, 4, dtype=dtype, seed=2)]:
        run(torch.geqrf, [a], ["geqrf"], dtype, scale=10)
    run(torch.geqrf, [rand(0, 3, dtype=dtype)], ["geqrf"], dtype)
    for m, n, left in [(5, 3, True), (4, 4, True), (3, 5, False)]:
        size = m if left else n
        a, tau = torch.geqrf(rand(2, size, min(size, 3), dtype=dtype, seed=4))
        c = rand(2, m, n, dtype=dtype, seed=5)
        for transpose in (False, True):
            run(lambda a_, t_, c_: torch.ormqr(a_, t_, c_, left, transpose), [a, tau, c], ["ormqr"], dtype, scale=10)


def hermitian_from(a, uplo):
    h = a.tril() if uplo == "L" else a.triu()
    h = h + h.mH - torch.diag_embed(h.diagonal(0, -2, -1))
    return h - 1j * torch.diag_embed(h.diagonal(0, -2, -1).imag) if a.is_complex() else h


def check_eigh(a, dtype):
    """Eigenvalues equal; eigenvectors orthonormal and reconstructing the Hermitian matrix that the
    read triangle describes (eigenvectors themselves are only unique up to phase)."""
    ops = lambda a: (torch.linalg.eigh(a), torch.linalg.eigh(a, UPLO="U"), torch.linalg.eigvalsh(a))  # noqa: E731
    expected, actual = run(ops, [a], ["_linalg_eigh"], dtype, compare=False)
    torch.testing.assert_close(actual[2], expected[2], **tol(dtype, 10))
    eye = torch.eye(a.shape[-1], dtype=dtype).expand_as(a)
    for (w, v), (w_cpu, _), uplo in zip(actual[:2], expected[:2], "LU"):
        torch.testing.assert_close(w, w_cpu, **tol(dtype, 10))
        torch.testing.assert_close(v @ torch.diag_embed(w).to(dtype) @ v.mH, hermitian_from(a, uplo), **tol(dtype, 10))
        torch.testing.assert_close(v.mH @ v, eye, **tol(dtype, 10))


@pytest.mark.parametrize("dtype", ALL, ids=name)
def test_eigh(dtype):
    check_eigh(rand(2, 3, 5, 5, dtype=dtype), dtype)  # not Hermitian: only one triangle is read
    # Repeated eigenvalues, a transposed (non-contiguous) input, a 1x1 matrix.
    q = torch.linalg.qr(rand(4, 4, dtype=dtype, seed=3))[0]
    rep = q @ torch.diag(torch.tensor([1.0, 1.0, 2.0, -3.0], dtype=dtype)) @ q.mH
    check_eigh(torch.stack([rep, spd(4, dtype, seed=4)]).mT, dtype)
    check_eigh(rand(1, 1, dtype=dtype), dtype)
    run(lambda a: torch.linalg.eigh(a)[0], [rand(0, 3, 3, dtype=dtype)], ["_linalg_eigh"], dtype)


@pytest.mark.parametrize("dtype", ALL, ids=name)
def test_matrix_exp_cross(dtype):
    # Norms from below the smallest Pade degree's threshold to ones that need squarings.
    a = torch.stack([rand(5, 5, dtype=dtype) / 40, rand(5, 5, dtype=dtype, seed=1) * 3,
                     rand(5, 5, dtype=dtype, seed=2).mT * 20, torch.zeros(5, 5, dtype=dtype)])
    run(torch.linalg.matrix_exp, [a], ["linalg_matrix_exp"], dtype, scale=20)
    run(torch.linalg.matrix_exp, [a[0, :2, :2].mT], ["linalg_matrix_exp"], dtype, scale=20)
    run(torch.linalg.matrix_exp, [rand(0, 2, 2, dtype=dtype)], ["linalg_matrix_exp"], dtype, scale=20)
    a, b = rand(4, 3, dtype=dtype), rand(4, 3, dtype=dtype, seed=1)
    run(lambda a, b: (torch.linalg.cross(a, b), torch.linalg.cross(a.t(), b.t(), dim=0),
                      torch.linalg.cross(a[None], b[:1, None]), torch.cross(a, b, dim=1)), [a, b], ["linalg_cross"],
        dtype)


def test_cross_integers():
    a, b = torch.randint(-5, 5, (4, 3)), torch.randint(-5, 5, (4, 3))
    run(torch.linalg.cross, [a, b], ["linalg_cross"], F32)


# ------------------------------------------------------------------------- linalg gradients

def eigh_loss(a):
    w, v = torch.linalg.eigh(a)
    # Gauge-invariant: eigenvalues, |v|^2 and the projector onto the two lowest eigenvectors.
    p = v[..., :2] @ v[..., :2].mH
    return real_sum(w) + real_sum(v.abs() ** 2, seed=4) + real_sum(p, seed=5)


@pytest.mark.parametrize("dtype", [F64, C128], ids=name)
def test_linalg_gradients(dtype):
    """Each term's backward formula runs on the device; a few terms per graph (one compile each)."""
    a = spd(3, dtype, (2,))
    g = well_conditioned(3, dtype, (2,))
    b = rand(2, 3, 2, dtype=dtype, seed=3)
    grads(lambda a, g, b: (real_sum(torch.linalg.cholesky_ex(a).L) + real_sum(torch.linalg.solve_ex(g, b).result, 2)
                           + real_sum(torch.linalg.solve_triangular(g.triu(), b, upper=True), 3)
                           + real_sum(torch.linalg.inv_ex(g).inverse, 4)),
          [a, g, b], ["linalg_cholesky_ex", "_linalg_solve_ex", "linalg_lu_solve", "linalg_solve_triangular",
                      "linalg_inv_ex"], dtype, scale=10)
    # det of a contiguous real matrix factors A^H; of a transposed one, A (their backward must agree).
    grads(lambda g: (real_sum(torch.linalg.det(g)) + real_sum(torch.linalg.det(g.mT), 2)
                     + real_sum(torch.linalg.slogdet(g)[1], 3) + real_sum(torch.linalg.slogdet(g)[0], 4)),
          [g], ["linalg_lu_factor_ex"], dtype, scale=10)
    grads(lambda g: (sum(real_sum(t, seed=i) for i, t in enumerate(torch.linalg.qr(g)))
                     + sum(real_sum(t, seed=i + 2) for i, t in enumerate(torch.linalg.lu(g)))
                     + real_sum(torch.linalg.matrix_exp(g / 4), 6)),
          [g], ["linalg_qr", "linalg_lu", "linalg_matrix_exp"], dtype, scale=10)
    grads(eigh_loss, [rand(2, 4, 4, dtype=dtype, seed=6)], ["_linalg_eigh"], dtype, scale=100)


def test_linalg_gradients_float32():
    a = spd(3, F32, (2,))
    g = well_conditioned(3, F32, (2,))
    grads(lambda a, g: (real_sum(torch.linalg.cholesky_ex(a).L) + real_sum(torch.linalg.inv_ex(g).inverse, 2)
                        + real_sum(torch.linalg.det(g), 3) + real_sum(torch.linalg.eigvalsh(g), 4)),
          [a, g], ["linalg_cholesky_ex", "linalg_inv_ex", "linalg_lu_factor_ex", "_linalg_eigh"], F32, scale=10)


# ---------------------------------------------------------------------------------- float8

def test_conversion_to_float8_e4m3fn_saturates_like_torch():
    # float8_e4m3fn has no infinity: torch saturates overflow (infinities too) to +-448; NaN stays.
    x = torch.tensor([1000.0, -1000.0, 500.0, float("inf"), -float("inf"), float("nan"), 3.3, 448.0, 449.0])
    for source in (x, x.double(), x.half(), x.bfloat16(), torch.tensor([1000, -3, 7])):
        want = source.to(torch.float8_e4m3fn).float()
        got = source.to("pjrt").to(torch.float8_e4m3fn).cpu().float()
        torch.testing.assert_close(got, want, equal_nan=True, rtol=0, atol=0)


@pytest.mark.parametrize("b_dtype", [torch.float8_e4m3fn, torch.float8_e5m2], ids=str)
@pytest.mark.parametrize("out_dtype", [None, torch.float8_e4m3fn, torch.bfloat16, torch.float32], ids=str)
def test_scaled_mm(b_dtype, out_dtype):
    # Tensor-wise and row-wise scales, a bias, and overflow of a float8 output (saturated, or NaN
    # where the CPU kernel hands all-e4m3fn products to oneDNN).
    g = torch.Generator().manual_seed(0)
    a = (torch.randn(6, 8, generator=g) * 40).to(torch.float8_e4m3fn)
    b = (torch.randn(8, 4, generator=g) * 40).to(b_dtype)
    scales = [(torch.tensor(0.5), torch.tensor(2.0)), (torch.rand(6, 1, generator=g), torch.rand(1, 4, generator=g))]
    for scale_a, scale_b in scales:
        bias = None if out_dtype in (None, torch.float8_e4m3fn) else torch.randn(4, generator=g).to(out_dtype)
        args = [a, b, scale_a, scale_b]
        with Counters() as c:
            got = torch._scaled_mm(*to_pjrt(args), bias=None if bias is None else bias.to("pjrt"), out_dtype=out_dtype)
            got = got.cpu()
        assert c["FallbackOps"] == 0
        want = torch._scaled_mm(*args, bias=bias, out_dtype=out_dtype)
        assert got.dtype == want.dtype
        torch.testing.assert_close(got.float(), want.float(), equal_nan=True, rtol=0.02, atol=1e-2)
    with pytest.raises(RuntimeError, match="shapes cannot be multiplied"):
        torch._scaled_mm(a.to("pjrt"), a.to("pjrt"), torch.tensor(1.0, device="pjrt"), torch.tensor(1.0, device="pjrt"))
