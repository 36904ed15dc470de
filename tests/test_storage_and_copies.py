"""Storage-level tensors (design decision 1): views alias, data_ptr semantics, resize_/set_, and
copies between CPU and pjrt and between pjrt devices, checked against CPU results."""
import pickle
import io

import pytest
import torch

from helpers import Counters, assert_close


@pytest.fixture
def pair():
    torch.manual_seed(0)
    a = torch.randn(4, 6)
    return a.clone(), a.to("pjrt")


def test_round_trip_dtypes():
    for dtype in [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.uint8,
                  torch.int16, torch.int32, torch.int64, torch.bool, torch.complex64]:
        a = (torch.randn(3, 5) * 10).to(dtype)
        assert torch.equal(a.to("pjrt").cpu(), a), dtype


def test_copy_converts_dtype_and_broadcasts(pair):
    a, x = pair
    y = torch.empty(4, 6, dtype=torch.float64, device="pjrt")
    y.copy_(a)  # cpu float32 -> pjrt float64
    assert_close(y, a.double())
    z = torch.empty(3, 4, 6, device="pjrt")
    z.copy_(x)  # broadcast on device
    assert_close(z, a.expand(3, 4, 6))
    h = torch.empty(4, 6, dtype=torch.int32)
    h.copy_(x)  # pjrt float -> cpu int
    assert torch.equal(h, a.to(torch.int32))


def test_non_contiguous_sources_and_destinations(pair):
    a, x = pair
    assert torch.equal(a.t().to("pjrt").cpu(), a.t())
    assert torch.equal(a[:, ::2].to("pjrt").cpu(), a[:, ::2])
    assert torch.equal(x.t().cpu(), a.t())
    assert torch.equal(x[1:3, 1::2].cpu(), a[1:3, 1::2])
    dst = torch.zeros(6, 4).t()  # non-contiguous CPU destination
    dst.copy_(x)
    assert torch.equal(dst, a)
    x.t()[2:4].copy_(torch.ones(2, 4))
    a.t()[2:4] = 1
    assert torch.equal(x.cpu(), a)


def test_views_alias_their_base(pair):
    a, x = pair
    x[0].add_(1)
    a[0] += 1
    assert_close(x, a)
    v = x.view(2, 12)
    v[1, 3:7].mul_(-2)
    a.view(2, 12)[1, 3:7] *= -2
    assert_close(x, a)
    x.t()[1].zero_()
    a.t()[1] = 0
    assert_close(x, a)
    d = x.diagonal()
    d.fill_(7)
    a.diagonal().fill_(7)
    assert_close(x, a)
    u = x.unfold(1, 2, 2)
    assert_close(u, a.unfold(1, 2, 2))
    e = x[:1].expand(5, 6)
    assert_close(e * 1, a[:1].expand(5, 6))
    assert x._base is None and v._base is x


def test_data_ptr_semantics(pair):
    _, x = pair
    assert x[1].data_ptr() == x.data_ptr() + 6 * 4
    assert x.t().data_ptr() == x.data_ptr()
    assert x.view(-1).data_ptr() == x.data_ptr()
    assert x.untyped_storage().data_ptr() == x.data_ptr()
    y = torch.empty(3, device="pjrt")
    assert y.data_ptr() != x.data_ptr()


def test_writes_through_overlapping_and_strided_views():
    base = torch.arange(12.).to("pjrt")
    ref = torch.arange(12.)
    base.as_strided((3, 2), (3, 2), 1).mul_(10)
    ref.as_strided((3, 2), (3, 2), 1).mul_(10)
    assert_close(base, ref)
    assert_close(base.as_strided((4, 3), (2, 1)), ref.as_strided((4, 3), (2, 1)))  # overlapping read


def test_dtype_reinterpreting_views():
    a = torch.randn(8)
    x = a.to("pjrt")
    assert torch.equal(x.view(torch.int32).cpu(), a.view(torch.int32))
    assert torch.equal(x.view(torch.int16).cpu(), a.view(torch.int16))
    assert torch.equal(x.view(torch.float64).cpu(), a.view(torch.float64))
    x.view(torch.int32)[2] = 0
    a.view(torch.int32)[2] = 0
    assert torch.equal(x.cpu(), a)


def test_resize_and_set():
    x = torch.arange(4.).to("pjrt")
    x.resize_(2, 4)
    assert x.shape == (2, 4)
    assert x.view(-1)[:4].cpu().tolist() == [0.0, 1.0, 2.0, 3.0]
    y = torch.empty(0, device="pjrt")
    y.set_(x.untyped_storage(), 2, (3,), (1,))
    assert y.cpu().tolist() == [2.0, 3.0, x.view(-1)[4].item()]
    y.fill_(9)
    assert x.view(-1)[2:5].cpu().tolist() == [9.0, 9.0, 9.0]
    z = torch.empty(0, device="pjrt").set_(x)
    assert z.data_ptr() == x.data_ptr() and z.shape == x.shape
    w = torch.ones(3, device="pjrt")
    w.set_()
    assert w.numel() == 0


def test_resize_keeps_strides_for_the_same_sizes_as_cpu():
    # pjrt made every resized tensor contiguous: an expanded out= of the right size then took
    # rand's numbers (CPU's resize_ keeps it expanded and uniform_ refuses it).
    def strides_after(dev):
        seen = []
        x = torch.zeros(3, device=dev).expand(2, 3)
        seen.append(x.resize_(2, 3).stride())
        y = torch.zeros(2, 3, device=dev).t()
        seen.append(y.resize_(3, 2).stride())
        seen.append(y.resize_(3, 2, memory_format=torch.contiguous_format).stride())
        seen.append(y.resize_(2, 2).stride())
        z = torch.zeros(2, 3, 4, 5, device=dev)
        seen.append(z.resize_(2, 3, 4, 5, memory_format=torch.channels_last).stride())
        return seen
    assert strides_after("pjrt") == strides_after("cpu")
    for dev in ("cpu", "pjrt"):
        with pytest.raises(RuntimeError, match="Unsupported memory format"):
            torch.zeros(2, device=dev).resize_(2, memory_format=torch.preserve_format)
        with pytest.raises(RuntimeError, match="more than one element of the written-to tensor"):
            torch.rand(2, 3, out=torch.zeros(3, device=dev).expand(2, 3))


def test_uninitialized_storage_reads_as_zeros_without_transfer():
    with Counters() as c:
        x = torch.empty(5, device="pjrt")
        assert x.cpu().tolist() == [0.0] * 5
    assert c["TransfersToDevice"] == 0


def test_scalars_and_item():
    x = torch.tensor([1.5, 2.5]).to("pjrt")
    assert x.sum().item() == 4.0
    assert x[1].item() == 2.5
    assert bool(x.gt(2).any()) is True
    assert int(torch.tensor(7).to("pjrt")) == 7


def test_serialization_round_trip():
    x = torch.randn(3, 3).to("pjrt")
    buf = io.BytesIO()
    torch.save(x, buf)
    buf.seek(0)
    y = torch.load(buf, map_location="cpu")
    assert torch.equal(y, x.cpu())
    buf.seek(0)
    z = torch.load(buf)
    assert z.device.type == "pjrt" and torch.equal(z.cpu(), x.cpu())


def test_copies_between_devices():
    a = torch.randn(3, 4)
    x0 = a.to("pjrt:0")
    x1 = x0.to("pjrt:1")
    assert x1.device == torch.device("pjrt:1")
    assert torch.equal(x1.cpu(), a)
    x3 = x1.t().to("pjrt:3")  # non-contiguous source across devices
    assert torch.equal(x3.cpu(), a.t())
    y = torch.zeros(4, 3, device="pjrt:2")
    y.copy_(x1.t() * 2)  # pending work on device 1 is synced first
    assert torch.equal(y.cpu(), a.t() * 2)
    back = y.to("pjrt:0")
    assert torch.equal(back.cpu(), a.t() * 2)
    with pytest.raises(RuntimeError, match="same device"):
        x0 + x1


def test_ops_on_each_device_stay_there():
    for d in range(4):
        x = torch.ones(2, device=f"pjrt:{d}") * (d + 1)
        assert x.device.index == d
        assert x.cpu().tolist() == [d + 1.0, d + 1.0]


def test_cpu_scalar_tensors_mix_with_pjrt():
    x = torch.ones(3, device="pjrt")
    y = x * torch.tensor(2.5)  # 0-d CPU tensor is allowed, like with CUDA
    assert y.cpu().tolist() == [2.5] * 3
    with pytest.raises(RuntimeError, match="same device"):
        x + torch.ones(3)


def test_cpu_index_tensors_index_a_pjrt_tensor_as_on_cuda():
    """Advanced indexing takes CPU index tensors (torch moves them to the indexed tensor's device,
    so x_cuda[cpu_indices] works): reads, masks, writes and accumulation, and the gradient, all
    lowered."""
    a = torch.arange(12.0).reshape(3, 4)
    rows, cols, mask = torch.tensor([2, 0, -1]), torch.tensor([1, 3, 0]), a > 5
    x = a.to("pjrt")
    with Counters() as c:
        assert torch.equal(x[rows].cpu(), a[rows])
        assert torch.equal(x[rows, cols].cpu(), a[rows, cols])
        assert torch.equal(x[mask].cpu(), a[mask])
        y, b = x.clone(), a.clone()
        y[rows, cols] = 7.0
        b[rows, cols] = 7.0
        assert torch.equal(y.cpu(), b)
        y.index_put_((rows,), torch.ones(4, device="pjrt"), accumulate=True)
        b.index_put_((rows,), torch.ones(4), accumulate=True)
        assert torch.equal(y.cpu(), b)
        w = x.clone().requires_grad_()
        w[rows, cols].sum().backward()
        wc = a.clone().requires_grad_()
        wc[rows, cols].sum().backward()
        assert torch.equal(w.grad.cpu(), wc.grad)
    assert c["FallbackOps"] == 0
    with pytest.raises(RuntimeError, match="same device"):
        x.index_select(0, rows)  # not advanced indexing: CUDA refuses a CPU index here too


def test_an_op_without_a_lowering_refuses_a_cpu_tensor_beside_a_pjrt_one():
    """A CPU input to a pjrt module is the user's mistake, refused as CUDA refuses it, also where
    the op would fall back to the CPU kernel (a convolution whose input is on the CPU selects the
    slow CPU convolution, which has no lowering): it used to run there and return a pjrt tensor."""
    torch.manual_seed(0)
    for module, shape in [(torch.nn.Conv2d(2, 3, 3), (1, 2, 5, 5)), (torch.nn.Conv1d(2, 3, 3), (1, 2, 5)),
                          (torch.nn.ConvTranspose2d(2, 3, 3), (1, 2, 5, 5))]:
        module = module.to("pjrt")
        with Counters() as c, pytest.raises(RuntimeError, match="same device"):
            module(torch.randn(shape))
        assert c["FallbackOps"] == 0, module
    m = torch.randn(3, 3) + 3 * torch.eye(3)
    ld, pivots = torch.linalg.ldl_factor(m.to("pjrt") @ m.to("pjrt").T)  # ldl_solve falls back
    with pytest.raises(RuntimeError, match="same device"):
        torch.linalg.ldl_solve(ld, pivots, torch.randn(3, 1))


def test_a_copy_of_a_materialized_tensor_shares_its_buffer_without_an_execution():
    """A copy whose value is another storage's whole buffer takes that (immutable) buffer at the
    sync instead of running a copy program (AccumulateGrad copies a gradient that reaches two
    parameters); writing either tensor afterwards leaves the other as it was, also where the write
    could donate the buffer (an in-place update of a parameter)."""
    x = torch.arange(6.0, device="pjrt")
    x.cpu()  # materialized
    with Counters() as c:
        y = torch.empty_like(x).copy_(x)
        y.cpu()
    assert c["Executions"] == 0
    x.mul_(2)
    assert x.cpu().tolist() == [0.0, 2.0, 4.0, 6.0, 8.0, 10.0] and y.cpu().tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    y.add_(1)
    assert y.cpu().tolist() == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0] and x.cpu().tolist()[1] == 2.0
    p = torch.nn.Parameter(torch.ones(4, device="pjrt"))
    p.grad = torch.full((4,), 0.5, device="pjrt")
    p.grad.cpu()
    saved = torch.empty_like(p).copy_(p.detach())
    saved.cpu()
    torch.optim.SGD([p], lr=1.0).step()
    assert p.detach().cpu().tolist() == [0.5] * 4 and saved.cpu().tolist() == [1.0] * 4
