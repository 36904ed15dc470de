"""scaled_dot_product_attention through pjrt's fused backend (aten/attention.cc, lowering/attention.cc):
results, gradients and output strides against CPU eager, that the fused path ran (one op each way,
not the math decomposition), and that calls it does not take keep torch's math path and errors."""
import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

NAN, INF = float("nan"), float("inf")


def _make(*shape, dtype=torch.float32, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


def _run(device, q, k, v, mask=None, **kw):
    """Output, its strides and the gradients of q, k, v (and a float mask) for a fixed weighting."""
    leaves = [t.detach().to(device).requires_grad_() for t in (q, k, v)]
    m = None
    if mask is not None:
        m = mask.detach().to(device)
        if m.is_floating_point():
            m.requires_grad_()
            leaves.append(m)
    out = F.scaled_dot_product_attention(*leaves[:3], attn_mask=m, **kw)
    weight = _make(*out.shape, dtype=out.dtype, seed=99).to(device)
    grads = torch.autograd.grad((out * weight).sum(), leaves)
    return out.detach().cpu(), out.stride(), [g.cpu() for g in grads]


def _fused_calls():
    lowered = torch.pjrt.metrics.lowered()
    return lowered.get("pjrt::attention", 0), lowered.get("pjrt::attention_backward", 0)


def _check(q, k, v, mask=None, atol=1e-5, rtol=1e-4, **kw):
    expected = _run("cpu", q, k, v, mask, **kw)
    torch.pjrt.metrics.reset()
    actual = _run("pjrt", q, k, v, mask, **kw)
    assert _fused_calls() == (1, 1), f"the fused path did not run: {torch.pjrt.metrics.lowered()}"
    assert "_safe_softmax" not in torch.pjrt.metrics.lowered() and torch.pjrt.metrics.fallbacks() == {}
    torch.testing.assert_close(actual[0], expected[0], atol=atol, rtol=rtol, equal_nan=True)
    assert actual[1] == expected[1], "output strides differ from CPU's"
    for a, e in zip(actual[2], expected[2]):
        torch.testing.assert_close(a, e, atol=atol, rtol=rtol, equal_nan=True)


B, H, L, S, E = 2, 4, 5, 6, 8

CASES = {
    "plain": lambda: (_make(B, H, L, E), _make(B, H, S, E, seed=1), _make(B, H, S, E, seed=2), None, {}),
    "value_dim": lambda: (_make(B, H, L, E), _make(B, H, S, E, seed=1), _make(B, H, S, 3, seed=2), None, {}),
    "causal_square": lambda: (_make(B, H, L, E), _make(B, H, L, E, seed=1), _make(B, H, L, E, seed=2), None,
                              {"is_causal": True}),
    "causal_more_keys": lambda: (_make(B, H, L, E), _make(B, H, S, E, seed=1), _make(B, H, S, E, seed=2), None,
                                 {"is_causal": True}),
    "causal_fewer_keys": lambda: (_make(B, H, S, E), _make(B, H, L, E, seed=1), _make(B, H, L, E, seed=2), None,
                                  {"is_causal": True}),
    "bool_mask_2d": lambda: (_make(B, H, L, E), _make(B, H, S, E, seed=1), _make(B, H, S, E, seed=2),
                             _make(L, S, seed=3) > 0, {}),
    "bool_mask_4d": lambda: (_make(B, H, L, E), _make(B, H, S, E, seed=1), _make(B, H, S, E, seed=2),
                             _make(B, 1, L, S, seed=3) > -0.5, {}),
    "float_mask_with_grad": lambda: (_make(B, H, L, E), _make(B, H, S, E, seed=1), _make(B, H, S, E, seed=2),
                                     _make(B, 1, L, S, seed=3), {}),
    "float_mask_full": lambda: (_make(B, H, L, E), _make(B, H, S, E, seed=1), _make(B, H, S, E, seed=2),
                                _make(B, H, L, S, seed=3), {}),
    # CPU's kernel applies both (torch's math path would refuse the pair).
    "causal_and_mask": lambda: (_make(B, H, L, E), _make(B, H, L, E, seed=1), _make(B, H, L, E, seed=2),
                                _make(B, 1, L, L, seed=3) > -1, {"is_causal": True}),
    "grouped_query": lambda: (_make(B, H, L, E), _make(B, 2, S, E, seed=1), _make(B, 2, S, E, seed=2), None,
                              {"enable_gqa": True}),
    "grouped_query_causal": lambda: (_make(B, H, L, E), _make(B, 1, L, E, seed=1), _make(B, 1, L, E, seed=2), None,
                                     {"enable_gqa": True, "is_causal": True}),
    "scale": lambda: (_make(B, H, L, E), _make(B, H, S, E, seed=1), _make(B, H, S, E, seed=2), None, {"scale": 0.7}),
    "negative_scale": lambda: (_make(B, H, L, E), _make(B, H, S, E, seed=1), _make(B, H, S, E, seed=2), None,
                               {"scale": -0.3}),
    "three_dims": lambda: (_make(H, L, E), _make(H, S, E, seed=1), _make(H, S, E, seed=2), _make(L, S, seed=3) > 0, {}),
    "transposed_layout": lambda: (_make(B, L, H, E).transpose(1, 2), _make(B, S, H, E, seed=1).transpose(1, 2),
                                  _make(B, S, H, E, seed=2).transpose(1, 2), None, {}),
    "float64": lambda: (_make(B, H, L, E, dtype=torch.float64), _make(B, H, S, E, seed=1, dtype=torch.float64),
                        _make(B, H, S, E, seed=2, dtype=torch.float64), None, {"is_causal": False}),
}


@pytest.mark.parametrize("case", CASES, ids=str)
def test_attention_matches_cpu(case):
    q, k, v, mask, kw = CASES[case]()
    tight = {"atol": 1e-12, "rtol": 1e-12} if q.dtype == torch.float64 else {}
    _check(q, k, v, mask, **kw, **tight)


def test_half_types_match_cpu_to_their_precision():
    for dtype in (torch.bfloat16, torch.float16):
        q, k, v = (_make(B, H, L, E, seed=s, dtype=dtype) for s in range(3))
        _check(q, k, v, _make(L, L, seed=3) > 0, atol=2e-2, rtol=2e-2)


def test_rows_with_no_visible_key_give_zeros_and_zero_gradients():
    # CPU's kernel (and torch's math path, through _safe_softmax) gives 0, not NaN, for such rows.
    mask = _make(L, S, seed=3) > 0
    mask[1] = False
    float_mask = torch.zeros(B, 1, L, S)
    float_mask[:, :, 2] = -INF
    q, k, v = _make(B, H, L, E), _make(B, H, S, E, seed=1), _make(B, H, S, E, seed=2)
    _check(q, k, v, mask)
    _check(q, k, v, float_mask)
    out = F.scaled_dot_product_attention(q.to("pjrt"), k.to("pjrt"), v.to("pjrt"), attn_mask=mask.to("pjrt")).cpu()
    assert out[:, :, 1].eq(0).all()


def test_infinity_and_nan_propagate_as_on_cpu():
    q, k, v = _make(B, H, L, E), _make(B, H, S, E, seed=1), _make(B, H, S, E, seed=2)
    k[1, 2, 3, 0] = INF
    v[0, 3, 4, 1] = -INF
    v[1, 1, 2, 5] = NAN
    _check(q, k, v)


def test_a_nan_query_gives_nan_as_torchs_math_path_does():
    # Known difference: CPU's flash kernel answers zeros for a query row holding NaN (its running
    # max skips NaN); torch's math path, and pjrt before and after the fused path, answer NaN.
    q, k, v = _make(B, H, L, E), _make(B, H, S, E, seed=1), _make(B, H, S, E, seed=2)
    q[0, 0, 1, 2] = NAN
    with sdpa_kernel([SDPBackend.MATH]):
        expected = F.scaled_dot_product_attention(q, k, v)
    actual = F.scaled_dot_product_attention(q.to("pjrt"), k.to("pjrt"), v.to("pjrt")).cpu()
    torch.testing.assert_close(actual, expected, equal_nan=True)
    assert actual[0, 0, 1].isnan().all()


def test_calls_the_fused_path_cannot_take_keep_the_math_path():
    q, k, v = (_make(B, H, L, E, seed=s).to("pjrt") for s in range(3))
    torch.pjrt.metrics.reset()
    out = F.scaled_dot_product_attention(q, k, v, dropout_p=0.5)  # drawn through native_dropout
    assert out.shape == (B, H, L, E) and _fused_calls() == (0, 0)
    assert torch.pjrt.metrics.lowered().get("native_dropout", 0) == 1
    # Mistakes the math path refuses, with CPU's error type.
    mask = torch.ones(L, L, dtype=torch.bool)
    for fn in (lambda d: F.scaled_dot_product_attention(q[0].to(d), k[0].to(d), v[0].to(d), attn_mask=mask.to(d),
                                                        is_causal=True),  # 3-d: CPU's math path refuses it
               lambda d: F.scaled_dot_product_attention(q.to(d), k.to(d), v.to(d), is_causal=True,
                                                        attn_mask=torch.zeros(L, L, device=d, requires_grad=True)),
               lambda d: F.scaled_dot_product_attention(q.to(d), k[:, :3].to(d), v[:, :3].to(d)),
               lambda d: F.scaled_dot_product_attention(q.to(d), k.to(d).double(), v.to(d))):
        with pytest.raises(RuntimeError) as cpu_error:
            fn("cpu")
        with pytest.raises(type(cpu_error.value)):
            fn("pjrt").cpu()
    assert _fused_calls() == (0, 0)


def test_sdpa_kernel_chooses_the_backends_as_on_cuda():
    q, k, v = (_make(B, H, L, E, seed=s) for s in range(3))
    expected = F.scaled_dot_product_attention(q, k, v)
    qd, kd, vd = (t.to("pjrt") for t in (q, k, v))
    torch.pjrt.metrics.reset()
    with sdpa_kernel([SDPBackend.MATH]):
        torch.testing.assert_close(F.scaled_dot_product_attention(qd, kd, vd).cpu(), expected)
    assert _fused_calls() == (0, 0)
    with sdpa_kernel([SDPBackend.OVERRIDEABLE]):
        torch.testing.assert_close(F.scaled_dot_product_attention(qd, kd, vd).cpu(), expected)
        assert _fused_calls() == (1, 0)
        with pytest.raises(RuntimeError, match="No viable backend"):
            F.scaled_dot_product_attention(qd, kd, vd, dropout_p=0.5)


def test_compiled_attention_matches_cpu():
    def step(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True).sum()

    q, k, v = (_make(B, H, L, E, seed=s) for s in range(3))
    expected = torch.autograd.grad(step(*(t.requires_grad_() for t in (q, k, v))), (q, k, v))
    qd, kd, vd = (t.detach().to("pjrt").requires_grad_() for t in (q, k, v))
    torch.pjrt.metrics.reset()
    actual = torch.autograd.grad(torch.compile(step, backend="pjrt")(qd, kd, vd), (qd, kd, vd))
    for a, e in zip(actual, expected):
        torch.testing.assert_close(a.cpu(), e, atol=1e-5, rtol=1e-4)
    assert _fused_calls() == (1, 1)
