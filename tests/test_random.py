"""Random numbers on the device (design decision 8): every random op runs in the graph from the
pjrt Generator's (seed, offset), never recompiles from step to step, reproduces with the same
seed like CUDA, and draws from the right distribution (mean, variance and a goodness-of-fit test
for each op and dtype, with fixed seeds so the tests are deterministic)."""
import math

import pytest
import torch

from helpers import Counters, step_launches

N = 20000
FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]


def draw(fn):
    """fn() on pjrt as a float64 CPU tensor; asserts it ran natively and without a sync."""
    with Counters() as c:
        x = fn()
    assert c["Executions"] == 0  # traced, not run: no sync per random op
    assert c["FallbackOps"] == 0, torch.pjrt.metrics.fallbacks()
    return x.cpu().double().flatten()


def ks_statistic(sample, cdf):
    """Kolmogorov-Smirnov distance between the sample and a continuous CDF."""
    x, _ = sample.sort()
    n = x.numel()
    f = cdf(x)
    upper = torch.arange(1, n + 1, dtype=torch.float64) / n - f
    lower = f - torch.arange(0, n, dtype=torch.float64) / n
    return max(upper.max().item(), lower.max().item())


def assert_fits(sample, cdf, dtype, mean=None, var=None):
    n = sample.numel()
    # alpha = 0.001: 1.95 / sqrt(n); half types are on a coarse grid, which adds up to one grid
    # step of distance.
    grid = {torch.float16: 2 ** -10, torch.bfloat16: 2 ** -7}.get(dtype, 0.0)
    assert ks_statistic(sample, cdf) < 1.95 / math.sqrt(n) + grid * 2
    if mean is not None:
        assert abs(sample.mean().item() - mean) < 5 * math.sqrt(var / n) + grid
    if var is not None:
        assert abs(sample.var().item() - var) < 0.05 * var + grid


def normal_cdf(x, mu=0.0, sigma=1.0):
    return 0.5 * (1 + torch.erf((x - mu) / (sigma * math.sqrt(2))))


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_uniform(dtype):
    torch.pjrt.manual_seed(1)
    x = draw(lambda: torch.rand(N, device="pjrt", dtype=dtype))
    assert x.min() >= 0 and x.max() < 1
    assert_fits(x, lambda t: t.clamp(0, 1), dtype, mean=0.5, var=1 / 12)
    y = draw(lambda: torch.empty(N, device="pjrt", dtype=dtype).uniform_(-3, 5))
    assert y.min() >= -3 and y.max() < 5
    assert_fits(y, lambda t: ((t + 3) / 8).clamp(0, 1), dtype, mean=1.0, var=64 / 12)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_normal(dtype):
    torch.pjrt.manual_seed(2)
    assert_fits(draw(lambda: torch.randn(N, device="pjrt", dtype=dtype)), normal_cdf, dtype, mean=0, var=1)
    assert_fits(draw(lambda: torch.empty(N, device="pjrt", dtype=dtype).normal_(2.0, 0.5)),
                lambda t: normal_cdf(t, 2.0, 0.5), dtype, mean=2.0, var=0.25)
    mean = torch.full((N,), -1.0, dtype=dtype, device="pjrt")
    assert_fits(draw(lambda: torch.normal(mean, 3.0)), lambda t: normal_cdf(t, -1.0, 3.0), dtype, mean=-1, var=9)
    std = torch.full((N,), 2.0, dtype=dtype, device="pjrt")
    assert_fits(draw(lambda: torch.normal(mean, std)), lambda t: normal_cdf(t, -1.0, 2.0), dtype, mean=-1, var=4)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_continuous_distributions(dtype):
    torch.pjrt.manual_seed(3)
    e = lambda: torch.empty(N, device="pjrt", dtype=dtype)
    assert_fits(draw(lambda: e().exponential_(2.0)), lambda t: 1 - torch.exp(-2.0 * t.clamp(min=0)), dtype,
                mean=0.5, var=0.25)
    assert_fits(draw(lambda: e().log_normal_(0.5, 0.25)),
                lambda t: normal_cdf(torch.log(t.clamp(min=1e-300)), 0.5, 0.25), dtype,
                mean=math.exp(0.5 + 0.25 ** 2 / 2), var=(math.exp(0.25 ** 2) - 1) * math.exp(1 + 0.25 ** 2))
    assert_fits(draw(lambda: e().cauchy_(1.0, 2.0)), lambda t: 0.5 + torch.atan((t - 1.0) / 2.0) / math.pi, dtype)


def assert_frequencies(sample, probabilities):
    """Every outcome's count within 5 standard deviations of its expectation."""
    n = sample.numel()
    for value, p in probabilities.items():
        count = (sample == value).sum().item()
        assert abs(count - n * p) <= 5 * math.sqrt(n * p * (1 - p)) + 1, (value, count, n * p)
    assert sum((sample == v).sum().item() for v in probabilities) == n


def test_discrete_distributions():
    torch.pjrt.manual_seed(4)
    b = draw(lambda: torch.empty(N, device="pjrt").bernoulli_(0.3))
    assert_frequencies(b, {0.0: 0.7, 1.0: 0.3})
    p = torch.full((N,), 0.8, device="pjrt")
    assert_frequencies(draw(lambda: torch.bernoulli(p)), {0.0: 0.2, 1.0: 0.8})
    g = draw(lambda: torch.empty(N, device="pjrt").geometric_(0.5))
    assert_frequencies(g[g <= 4], {k: 0.5 ** k / (1 - 0.5 ** 4) for k in (1, 2, 3, 4)})
    assert g.min() >= 1
    for dtype in (torch.int64, torch.int32, torch.uint8, torch.float32):
        r = draw(lambda: torch.randint(3, 9, (N,), device="pjrt", dtype=dtype))
        assert_frequencies(r, {v: 1 / 6 for v in range(3, 9)})
    r = draw(lambda: torch.empty(N, device="pjrt", dtype=torch.bool).random_())
    assert_frequencies(r, {0.0: 0.5, 1.0: 0.5})


def test_randperm_and_multinomial():
    torch.pjrt.manual_seed(5)
    for n in (1, 7, 1000):
        p = draw(lambda: torch.randperm(n, device="pjrt"))
        assert torch.equal(p.sort().values, torch.arange(n, dtype=torch.float64))
    weights = torch.tensor([0.1, 0.0, 0.6, 0.3], device="pjrt")
    with_replacement = draw(lambda: torch.multinomial(weights, N, replacement=True))
    assert_frequencies(with_replacement, {0: 0.1, 1: 0.0 + 1e-12, 2: 0.6, 3: 0.3})
    rows = weights.repeat(2000, 1)
    firsts = draw(lambda: torch.multinomial(rows, 3)[:, 0])
    assert_frequencies(firsts, {0: 0.1, 2: 0.6, 3: 0.3})
    picks = torch.multinomial(rows, 3).cpu()
    assert all(len(set(r.tolist())) == 3 and 1 not in r.tolist() for r in picks)  # no repeats, never p=0


def test_same_seed_same_numbers_like_cuda():
    def sample():
        return torch.cat([torch.rand(5, device="pjrt"), torch.randn(5, device="pjrt"),
                          torch.randint(0, 100, (5,), device="pjrt").float()]).cpu()

    torch.manual_seed(123)  # torch.manual_seed seeds the pjrt generators too
    a = sample()
    torch.pjrt.manual_seed(123)
    b = sample()
    assert torch.equal(a, b)
    assert not torch.equal(sample(), b)  # the generator moved on
    state = torch.pjrt.get_rng_state()
    c = sample()
    torch.pjrt.set_rng_state(state)
    assert torch.equal(sample(), c)
    with torch.random.fork_rng(device_type="pjrt"):
        inside = sample()
    assert torch.equal(sample(), inside)  # fork_rng restored the state it forked from


def test_explicit_generator():
    g = torch.Generator(device="pjrt")
    g.manual_seed(7)
    a = torch.rand(4, device="pjrt", generator=g).cpu()
    torch.rand(4, device="pjrt")  # the default generator is independent
    g.manual_seed(7)
    assert torch.equal(torch.rand(4, device="pjrt", generator=g).cpu(), a)
    with pytest.raises(RuntimeError, match="Expected a 'pjrt' device type for generator"):
        torch.rand(4, device="pjrt", generator=torch.Generator())


def test_dropout_training_step_never_syncs_apart_and_never_recompiles():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Dropout(0.2),
                                torch.nn.Linear(32, 1)).to("pjrt")
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x = torch.randn(8, 16).to("pjrt")
    losses = []
    for step in range(6):
        with Counters() as c:
            opt.zero_grad()
            loss = model(x).square().mean()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        if step >= 2:
            assert step_launches(c) == (3, 1, 1, 1) and c["GraphsCompiled"] == 0 and c["FallbackOps"] == 0
    assert len(set(losses)) == len(losses)  # a new dropout mask every step


def test_dropout_matches_its_definition_and_backward():
    torch.pjrt.manual_seed(9)
    x = torch.randn(4000).to("pjrt").requires_grad_()
    y = torch.nn.functional.dropout(x, 0.25)
    y.sum().backward()
    kept = (y != 0).cpu()
    assert abs(kept.float().mean().item() - 0.75) < 0.03
    torch.testing.assert_close(y.detach().cpu()[kept], x.detach().cpu()[kept] / 0.75)
    torch.testing.assert_close(x.grad.cpu(), kept.float() / 0.75)
    assert torch.equal(torch.nn.functional.dropout(x, 0.25, training=False).detach().cpu(), x.detach().cpu())


# ---------------------------------------------------------------------------------- argument checks

def _raised(fn, dev):
    try:
        result = fn(dev)
        result.cpu()
    except RuntimeError as e:
        return str(e).splitlines()[0]
    return None


# Arguments CPU's kernels refuse, which torch's Meta kernels accept: pjrt drew from them silently
# (a p of 1.5 drew ones, uniform_(1, 0) numbers in [0, 1), a negative std flipped the noise,
# multinomial sampled from negative or all-zero rows). Numbers are refused at the call; tensors
# when the graph runs, with CPU's message.
BAD_RANDOM_ARGUMENTS = {
    "uniform_ from > to": lambda d: torch.zeros(3, device=d).uniform_(1, 0),
    "uniform_ to infinite": lambda d: torch.zeros(3, device=d).uniform_(0, math.inf),
    "random_ from >= to": lambda d: torch.zeros(3, device=d).random_(5, 2),
    "random_ to 0": lambda d: torch.zeros(3, device=d).random_(0),
    "randint high <= low": lambda d: torch.randint(5, 2, (3,), device=d),
    "bernoulli_ p 1.5": lambda d: torch.zeros(3, device=d).bernoulli_(1.5),
    "bernoulli p tensor": lambda d: torch.bernoulli(torch.tensor([0.5, 1.5], device=d)),
    "bernoulli p NaN": lambda d: torch.bernoulli(torch.tensor([0.5, math.nan], device=d)),
    "bernoulli_ p tensor": lambda d: torch.zeros(2, device=d).bernoulli_(torch.tensor([0.5, -0.5], device=d)),
    "normal std tensor": lambda d: torch.normal(torch.zeros(2, device=d), torch.tensor([1.0, -1.0], device=d)),
    "normal float mean, std tensor": lambda d: torch.normal(0.0, torch.tensor([1.0, math.nan], device=d)),
    "multinomial negative": lambda d: torch.multinomial(torch.tensor([0.5, -1.0], device=d), 1),
    "multinomial infinite": lambda d: torch.multinomial(torch.tensor([1.0, math.inf], device=d), 1),
    "multinomial zero row": lambda d: torch.multinomial(torch.tensor([[1.0, 1.0], [0.0, 0.0]], device=d), 1, True),
}


@pytest.mark.parametrize("name", BAD_RANDOM_ARGUMENTS)
def test_random_ops_refuse_what_the_cpu_refuses(name):
    fn = BAD_RANDOM_ARGUMENTS[name]
    want = _raised(fn, "cpu")
    assert want is not None
    assert _raised(fn, "pjrt") == want
    torch.pjrt.synchronize()  # reported once: the device keeps working


def _expanded(dev):
    return torch.zeros(3, device=dev).expand(2, 3)


# A written tensor whose elements share memory (an expanded view): CPU's random kernels refuse it
# (TensorIterator's internal-overlap check); pjrt drew one number per element into the same slots.
OVERLAPPING_RANDOM_WRITES = {
    "uniform_": lambda d: _expanded(d).uniform_(),
    "normal_": lambda d: _expanded(d).normal_(),
    "bernoulli_": lambda d: _expanded(d).bernoulli_(0.5),
    "random_": lambda d: _expanded(d).random_(0, 5),
    "exponential_": lambda d: _expanded(d).exponential_(),
    "bernoulli out=": lambda d: torch.bernoulli(torch.full((2, 3), 0.5, device=d), out=_expanded(d)),
    "normal out=": lambda d: torch.normal(torch.zeros(2, 3, device=d), 1.0, out=_expanded(d)),
    "rand out=": lambda d: torch.rand(2, 3, out=_expanded(d)),
}


@pytest.mark.parametrize("name", OVERLAPPING_RANDOM_WRITES)
def test_random_ops_refuse_an_overlapping_written_tensor_without_drawing_on_the_cpu(name):
    fn = OVERLAPPING_RANDOM_WRITES[name]
    want = _raised(fn, "cpu")
    assert want is not None and want.startswith("unsupported operation")
    torch.manual_seed(5)
    expected = torch.rand(2)
    torch.manual_seed(5)
    assert _raised(fn, "pjrt") == want
    assert torch.equal(torch.rand(2), expected)  # the probe drew from a generator of its own


def test_valid_random_arguments_pass_and_probing_them_draws_nothing_on_the_cpu():
    torch.manual_seed(3)
    expected = torch.rand(4)
    torch.manual_seed(3)
    d = torch.zeros(3, device="pjrt")
    torch.pjrt.metrics.reset()
    d.uniform_(0.25, 0.5 + torch.rand(1, generator=torch.Generator().manual_seed(1)).item())  # a new number
    d.random_(2, 9)
    torch.bernoulli(torch.full((2,), 0.5, device="pjrt"))
    torch.normal(torch.zeros(2, device="pjrt"), torch.ones(2, device="pjrt"))
    picked = torch.multinomial(torch.tensor([[1.0, 0.0], [0.0, 2.0]], device="pjrt"), 1)
    assert picked.cpu().tolist() == [[0], [1]]
    assert torch.pjrt.metrics.fallbacks() == {}
    assert torch.equal(torch.rand(4), expected)  # the CPU's default generator did not advance
