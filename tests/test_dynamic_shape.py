"""Ops whose result size depends on the data run on the device: the size is computed there and
only that number crosses (one Sync::data_dependent_shape), never a CPU fallback copying whole
tensors (docs/design.md, "Data-dependent shapes")."""
import math

import pytest
import torch

from helpers import Counters

DTYPES = [torch.bool, torch.uint8, torch.int32, torch.int64, torch.float16, torch.bfloat16, torch.float32,
          torch.float64]


def sample(dtype, shape=(3, 4)):
    g = torch.Generator().manual_seed(0)
    x = torch.randint(-2, 3, shape, generator=g)
    if dtype == torch.bool:
        return x > 0
    if dtype == torch.uint8:
        return x.abs().to(dtype)
    x = x.to(dtype)
    if dtype.is_floating_point:
        x.view(-1)[0] = math.nan
        x.view(-1)[1] = -0.0
    return x


def native(fn, *args, expected_syncs=None, exact=True):
    """fn on the CPU and on pjrt: equal results, no fallback, data_dependent_shape syncs only."""
    want = fn(*args)
    with Counters() as c:
        got = fn(*[a.to("pjrt") if isinstance(a, torch.Tensor) else a for a in args])
        got = torch.utils._pytree.tree_map(lambda t: t.cpu() if isinstance(t, torch.Tensor) else t, got)
    assert c["FallbackOps"] == 0, torch.pjrt.metrics.fallbacks()
    if expected_syncs is not None:
        assert c["Sync::data_dependent_shape"] == expected_syncs
    torch.testing.assert_close(got, want, equal_nan=True, **(dict(rtol=0, atol=0) if exact else {}))
    return c


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_nonzero(dtype):
    native(torch.nonzero, sample(dtype), expected_syncs=1)
    native(lambda t: torch.nonzero(t, as_tuple=True), sample(dtype, (2, 3, 2)))
    native(torch.argwhere, sample(dtype, (5,)))


@pytest.mark.parametrize("shape", [(0,), (0, 3), (), (1,), (2, 0, 2)], ids=str)
def test_nonzero_of_empty_and_0d(shape):
    native(torch.nonzero, torch.ones(shape))
    native(torch.nonzero, torch.zeros(shape))


@pytest.mark.parametrize("shape", [(4, 3, 3), (5,), (), (0, 3)], ids=str)
def test_nonzero_is_column_major_as_on_the_cpu(shape):
    """CPU (and CUDA) fill nonzero's result as [rank, count] and return its transpose; out= keeps
    the layout of an out of the right size and gives a resized one that layout."""
    x = torch.randn(shape)
    assert torch.nonzero(x.to("pjrt")).stride() == torch.nonzero(x).stride()
    for make in (lambda d: torch.empty(0, dtype=torch.long, device=d),
                 lambda d: torch.empty(torch.nonzero(x).shape, dtype=torch.long, device=d)):
        want, got = make("cpu"), make("pjrt")
        torch.nonzero(x, out=want)
        torch.nonzero(x.to("pjrt"), out=got)
        assert got.stride() == want.stride() and torch.equal(got.cpu(), want)


def test_nonzero_out_and_where_one_arg():
    x = sample(torch.float32)
    out = torch.empty(0, dtype=torch.long, device="pjrt")
    torch.nonzero(x.to("pjrt"), out=out)
    assert torch.equal(out.cpu(), torch.nonzero(x))
    native(lambda t: torch.where(t), x)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_masked_select_broadcasts(dtype):
    x = sample(dtype)
    native(torch.masked_select, x, sample(torch.bool), expected_syncs=1)
    native(torch.masked_select, x, sample(torch.bool, (4,)))
    native(torch.masked_select, x[:1], sample(torch.bool))


def test_boolean_mask_indexing():
    x = sample(torch.float32, (3, 4, 2))
    native(lambda t, m: t[m], x, sample(torch.bool, (3,)))
    native(lambda t, m: t[m], x, sample(torch.bool, (3, 4)))
    native(lambda t, m: t[:, m], x, sample(torch.bool, (4,)))
    native(lambda t, m: t[m, 1], x, sample(torch.bool, (3,)))
    native(lambda t, m: t[m], x, torch.zeros(3, dtype=torch.bool))
    with pytest.raises(IndexError, match="shape of the mask"):
        x.to("pjrt")[torch.ones(5, dtype=torch.bool, device="pjrt")]


def test_setting_through_a_mask():
    def put_scalar(t, m):
        t = t.clone()
        t[m] = 7.0
        return t

    def put_tensor(t, m):
        t = t.clone()
        t[m] = torch.arange(int(m.sum()), dtype=t.dtype, device=t.device)
        return t

    x = sample(torch.float32)
    mask = sample(torch.bool)
    c = native(put_scalar, x, mask)
    assert c["Sync::data_dependent_shape"] == 0  # a masked_fill: nothing depends on the data
    native(put_tensor, x, mask)
    native(lambda t, m: t.clone().index_put_((m,), torch.tensor(2.0, device=t.device), accumulate=True), x, mask)


def test_boolean_indexing_gradient():
    x = sample(torch.float32).nan_to_num()
    mask = sample(torch.bool)
    grads = []
    for device in ("cpu", "pjrt"):
        t = x.detach().to(device).requires_grad_()
        (t[mask.to(device)] * 3).sum().backward()
        grads.append(t.grad.cpu())
    torch.testing.assert_close(grads[1], grads[0])


@pytest.mark.parametrize("dtype", [torch.bool, torch.uint8, torch.int32, torch.int64, torch.float32, torch.float64],
                         ids=str)
@pytest.mark.parametrize("inverse", [False, True])
@pytest.mark.parametrize("counts", [False, True])
def test_unique(dtype, inverse, counts):
    native(lambda t: torch.unique(t, return_inverse=inverse, return_counts=counts), sample(dtype), expected_syncs=1)


def test_unique_of_nan_and_empty():
    native(torch.unique, torch.tensor([math.nan, 1.0, math.nan, -0.0, 0.0]))
    native(lambda t: torch.unique(t, return_inverse=True, return_counts=True), torch.zeros(0))


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int32, torch.int64], ids=str)
@pytest.mark.parametrize("weights", [None, torch.float32, torch.float64, torch.int64], ids=str)
@pytest.mark.parametrize("minlength", [0, 9])
def test_bincount(dtype, weights, minlength):
    x = torch.tensor([1, 4, 4, 0, 7, 4], dtype=dtype)
    w = None if weights is None else torch.tensor([0.5, 1, 2, 3, 4, 5]).to(weights)
    native(lambda t, u: torch.bincount(t, u, minlength), x, w, expected_syncs=1)


def test_bincount_of_empty_input_reads_nothing():
    native(lambda t: torch.bincount(t, minlength=4), torch.tensor([], dtype=torch.long), expected_syncs=0)


@pytest.mark.parametrize("case", [
    (torch.tensor([-1, 2]), {}, RuntimeError),  # negative values
    (torch.tensor([[1]]), {}, RuntimeError),  # not 1-d
    (torch.tensor([1.0]), {}, NotImplementedError),  # not integral
    (torch.tensor([1, 2]), {"weights": torch.tensor([1.0])}, RuntimeError),
    (torch.tensor([1, 2]), {"minlength": -1}, RuntimeError),
], ids=["negative", "2d", "float", "weights_length", "minlength"])
def test_bincount_errors_match_cpu(case):
    x, kwargs, error = case
    with pytest.raises(error) as cpu:
        torch.bincount(x, **kwargs)
    pjrt_kwargs = {k: v.to("pjrt") if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}
    with pytest.raises(error) as pjrt:
        torch.bincount(x.to("pjrt"), **pjrt_kwargs)
    if error is RuntimeError:
        assert str(pjrt.value) == str(cpu.value)


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64], ids=str)
def test_repeat_interleave_reads_its_total(dtype):
    r = torch.tensor([2, 0, 3, 1], dtype=dtype)
    native(torch.repeat_interleave, r, expected_syncs=1)
    native(lambda x, t: torch.repeat_interleave(x, t, dim=0), torch.arange(8.0).reshape(4, 2), r)
    native(lambda x, t: torch.repeat_interleave(x, t), torch.arange(4.0), r)


def test_repeat_interleave_with_output_size_does_not_sync():
    r = torch.tensor([2, 0, 3])
    native(lambda t: torch.repeat_interleave(t, output_size=5), r, expected_syncs=0)
    native(torch.repeat_interleave, torch.tensor([], dtype=torch.long), expected_syncs=0)


def test_repeat_interleave_errors_match_cpu():
    with pytest.raises(RuntimeError, match="repeats can not be negative"):
        torch.repeat_interleave(torch.tensor([-1, 2], device="pjrt"))
    with pytest.raises(RuntimeError, match="only accept 1D"):
        torch.repeat_interleave(torch.tensor([[1]], device="pjrt"))
    # With output_size there is no read: the checks run with the graph and raise at the next read.
    for repeats, size, message in [([2, 0, 3], 4, "allocated size does not match"), ([-1, 2], 1, "can not be negative")]:
        out = torch.repeat_interleave(torch.tensor(repeats, device="pjrt"), output_size=size)
        with pytest.raises(RuntimeError, match=message):
            out.cpu()


@pytest.mark.parametrize("fn", [torch.tril_indices, torch.triu_indices], ids=lambda f: f.__name__)
@pytest.mark.parametrize("args", [(3, 3, 0), (4, 5, 1), (5, 3, -2), (0, 3, 0), (3, 0, 1), (4, 4, 10), (4, 4, -10)],
                         ids=str)
@pytest.mark.parametrize("dtype", [torch.int32, torch.int64], ids=str)
def test_triangle_indices_run_on_the_device(fn, args, dtype):
    with Counters() as c:
        got = fn(*args, device="pjrt", dtype=dtype).cpu()
    assert c["FallbackOps"] == 0 and c["Sync::data_dependent_shape"] == 0
    want = fn(*args, dtype=dtype)
    assert got.dtype == want.dtype and torch.equal(got, want)


def test_triangle_indices_errors_match_cpu():
    with pytest.raises(RuntimeError, match="row must be non-negative"):
        torch.tril_indices(-1, 3, device="pjrt")
    with pytest.raises(NotImplementedError):
        torch.triu_indices(3, 3, device="pjrt", dtype=torch.float32)


@pytest.mark.parametrize("dtype", [torch.int64, torch.float32], ids=str)
def test_the_older_unique_op(dtype):
    # aten::_unique (index_fill's gradient reaches it): sorted whether asked or not, as on the CPU.
    x = torch.tensor([3, 1, 3, 2, 1, 5], dtype=dtype)
    for sorted_ in (False, True):
        for inverse in (False, True):
            native(lambda t: torch.ops.aten._unique(t, sorted_, inverse), x, expected_syncs=1)


HISTOGRAM_INPUT = torch.randn(100, generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize("case", ["bins", "range", "weighted_density", "constant", "empty", "nan_and_edges", "2d"])
def test_histogram_with_a_bin_count(case):
    # Without a range the data's min and max cross in one read (as the CPU kernel reads them).
    x, w = HISTOGRAM_INPUT, HISTOGRAM_INPUT.abs()
    fn, args, syncs = {
        "bins": (lambda t: torch.histogram(t, bins=7), (x,), 1),
        "range": (lambda t: torch.histogram(t, bins=7, range=(-1.0, 1.0)), (x,), 0),
        "weighted_density": (lambda t, u: torch.histogram(t, bins=5, weight=u, density=True), (x, w), 1),
        "constant": (lambda t: torch.histogram(t, bins=4), (torch.tensor([1.0, 1.0, 1.0]),), 1),
        "empty": (lambda t: torch.histogram(t, bins=4), (torch.tensor([]),), 0),
        "nan_and_edges": (lambda t: torch.histogram(t, bins=3, range=(0.0, 3.0)),
                          (torch.tensor([1.0, math.nan, 2.0, 3.0, 0.0, -1.0]),), 0),
        "2d": (lambda t: torch.histogram(t, bins=6), (x.double().reshape(10, 10),), 1),
    }[case]
    c = native(fn, *args, exact=False)  # bin edges: our linspace can be an ulp off the CPU's
    assert c["Sync::data_dependent_shape"] == syncs


def test_histogram_with_bin_edges_and_errors():
    edges = torch.tensor([-2.0, -0.5, 0.0, 0.1, 3.0])
    native(lambda t, b: torch.histogram(t, bins=b), HISTOGRAM_INPUT, edges, expected_syncs=0)
    native(lambda t, b, u: torch.histogram(t, bins=b, weight=u, density=True), HISTOGRAM_INPUT, edges,
           HISTOGRAM_INPUT.abs(), expected_syncs=0, exact=False)  # weights summed in another order
    for x, kwargs, error in [(HISTOGRAM_INPUT, {"bins": 0}, RuntimeError),
                             (torch.tensor([1.0, math.inf]), {"bins": 3}, RuntimeError),
                             (torch.tensor([1, 2]), {"bins": 3}, NotImplementedError),
                             (HISTOGRAM_INPUT, {"bins": 3, "range": (2.0, 1.0)}, RuntimeError)]:
        with pytest.raises(error) as cpu:
            torch.histogram(x, **kwargs)
        with pytest.raises(error) as pjrt:
            torch.histogram(x.to("pjrt"), **kwargs)
        assert str(pjrt.value) == str(cpu.value)


def histogramdd_native(fn, *args, syncs):
    want = fn(*args)
    with Counters() as c:
        got = fn(*[a.to("pjrt") for a in args])
        hist, edges = got.hist.cpu(), [e.cpu() for e in got.bin_edges]
    assert c["FallbackOps"] == 0 and c["Sync::data_dependent_shape"] == syncs
    torch.testing.assert_close(hist, want.hist)
    torch.testing.assert_close(edges, list(want.bin_edges))


def test_histogramdd():
    # torch.histogramdd runs _histogramdd_bin_edges and _histogramdd_from_bin_cts: each reads
    # the data's per-dim min and max once when no range is given (as on the CPU). The second
    # read is of the same computation over the same buffer: it takes the first one's result
    # (graph/read_memo.h), so one sync.
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(50, 3, generator=g), torch.rand(50, generator=g)
    histogramdd_native(lambda t: torch.histogramdd(t, bins=[3, 4, 2]), x, syncs=1)
    histogramdd_native(lambda t: torch.histogramdd(t, bins=[3, 4, 2], range=[-1.0, 1.0, 0.0, 2.0, -3.0, 3.0]), x,
                       syncs=0)
    histogramdd_native(lambda t, u: torch.histogramdd(t, bins=[3, 4, 2], weight=u, density=True), x, w, syncs=1)
    edges = [torch.tensor([-2.0, 0.0, 2.0]), torch.tensor([-1.0, 1.0]), torch.tensor([-3.0, 0.0, 0.5, 3.0])]
    histogramdd_native(lambda t: torch.histogramdd(t, bins=[e.to(t.device) for e in edges]), x, syncs=0)
    histogramdd_native(lambda t: torch.histogramdd(t.reshape(5, 10, 3), bins=[3, 3, 3]), x, syncs=1)
    histogramdd_native(lambda t: torch.histogramdd(t, bins=[2, 2]), torch.randn(0, 2), syncs=0)
    for kwargs in [{"bins": [3, 0, 2]}, {"bins": [3, 3, 3], "range": [0.0, 1.0]}]:
        with pytest.raises(RuntimeError) as cpu:
            torch.histogramdd(x, **kwargs)
        with pytest.raises(RuntimeError) as pjrt:
            torch.histogramdd(x.to("pjrt"), **kwargs)
        assert str(pjrt.value) == str(cpu.value)
