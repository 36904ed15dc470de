"""PyTorch's OpInfo error inputs run on the pjrt device.

Every `error_inputs` sample in `op_db` that raises on the CPU must raise on pjrt too, with an
exception of CPU's type (or a subclass): results are read, so a check made when the graph runs
counts. A silent answer where the CPU refuses is a wrong answer. The first run of this sweep
(2026-11-28) found complex's and aminmax's out= dtype rules, masked_scatter's uint8 mask, gelu's
approximate string, multinomial's sample count and integer input, all accepted by pjrt.
"""
import pytest
import torch
from torch.testing._internal.common_methods_invocations import op_db
from torch.utils._pytree import tree_flatten, tree_map

torch.pjrt.set_fallback_warnings(False)

# CPU refusals pjrt does not make, by message, each with its reason.
KNOWN_GAPS = {
    # A size check on the probabilities' last dimension (2^24 + 1 categories): the Meta kernel
    # does not make it, and the CPU probe's stand-ins cut every dimension to 1.
    "number of categories cannot exceed 2^24": "shape check only CPU's kernel makes",
}


def _to_pjrt(x):
    return x.to("pjrt") if isinstance(x, torch.Tensor) and x.device.type == "cpu" else x


def _call(op, sample, device):
    move = (lambda x: x) if device == "cpu" else lambda t: tree_map(_to_pjrt, t)
    result = op(move(sample.input), *move(sample.args), **move(sample.kwargs))
    if device == "pjrt":
        tree_map(lambda t: t.cpu() if isinstance(t, torch.Tensor) else t, result)
        torch.pjrt.synchronize()


def _aliases(sample):
    """Whether the sample's tensors share memory (an out= view of an input, an expanded out=):
    moving each tensor to the device apart loses that, so the device cannot see the overlap."""
    tensors = [t for t in tree_flatten((sample.input, sample.args, sample.kwargs))[0] if isinstance(t, torch.Tensor)]
    storages = [t.untyped_storage().data_ptr() for t in tensors if t.numel() > 0]
    expanded = any(0 in t.stride() and t.numel() > 1 for t in tensors)
    return expanded or len(storages) != len(set(storages))


def _raises_on_cpu(op, sample):
    try:
        _call(op, sample, "cpu")
    except Exception as e:  # noqa: BLE001 - whatever the CPU raises
        return e
    return None


OPS_WITH_ERROR_INPUTS = [op for op in op_db if op.error_inputs_func is not None]


@pytest.mark.parametrize("op", OPS_WITH_ERROR_INPUTS, ids=[f"{op.name}.{op.variant_test_name}".rstrip(".")
                                                           for op in OPS_WITH_ERROR_INPUTS])
def test_error_inputs_raise_like_cpu(op):
    failures = []
    for error_input in op.error_inputs("cpu"):
        sample = error_input.sample_input
        cpu_error = _raises_on_cpu(op, sample)
        if cpu_error is None or _aliases(sample):
            continue  # a refusal of another device (CUDA), or aliasing the device cannot see
        if any(known in str(cpu_error) for known in KNOWN_GAPS):
            continue
        try:
            _call(op, sample, "pjrt")
        except Exception as e:  # noqa: BLE001
            if not isinstance(e, type(cpu_error)):
                failures.append(f"CPU raised {type(cpu_error).__name__} ({cpu_error}), pjrt {type(e).__name__} ({e})")
            try:
                torch.pjrt.synchronize()  # a failed check must not leak into the next sample
            except Exception:  # noqa: BLE001
                pass
            continue
        failures.append(f"CPU raised {type(cpu_error).__name__} ({str(cpu_error).splitlines()[0]}), pjrt accepted "
                        f"{sample!r:.300}")
    assert not failures, "\n".join(failures)
