"""Every memo key covers everything that can change its result (docs/design.md, "Cache keys"):
each test changes one ingredient and checks that a new entry is made and the result is right,
and that a changed *value* scalar reuses the entry."""
import torch

from helpers import Counters, run_python


def new_graphs(fn):
    """(fn()'s result on the CPU, graphs made for it: compiled or loaded from disk)."""
    torch.pjrt.synchronize()
    with Counters() as c:
        result = fn().cpu()
    return result, c["GraphsCompiled"] + c["CacheHitsDisk"]


def program(t):
    return (t * 2 + 1).sum()


def test_default_dtype_is_part_of_the_meta_and_graph_keys():
    old = torch.get_default_dtype()
    try:
        torch.set_default_dtype(torch.float32)
        as_f32, _ = new_graphs(lambda: torch.arange(5, device="pjrt") * 0.5)
        torch.set_default_dtype(torch.float64)
        as_f64, made = new_graphs(lambda: torch.arange(5, device="pjrt") * 0.5)
        assert as_f32.dtype == torch.float32 and as_f64.dtype == torch.float64
        assert made >= 1  # a graph of its own
        torch.set_default_dtype(torch.float32)
        again, made = new_graphs(lambda: torch.arange(5, device="pjrt") * 0.5)
        assert again.dtype == torch.float32 and made == 0  # the float32 graph is found again
    finally:
        torch.set_default_dtype(old)


def test_memory_format_is_part_of_the_meta_key():
    x = torch.randn(2, 3, 4, 5, device="pjrt")
    c = torch.randn(2, 3, 4, 5)
    for fmt in (torch.contiguous_format, torch.channels_last, torch.preserve_format, torch.channels_last):
        assert x.clone(memory_format=fmt).stride() == c.clone(memory_format=fmt).stride(), fmt


def test_scalar_kind_is_part_of_the_meta_key_but_its_value_is_not():
    x = torch.arange(4, device="pjrt")
    cpu = torch.arange(4)
    for scalar in (2, 2.0, True, 1 + 2j):
        assert (x * scalar).dtype == (cpu * scalar).dtype, scalar
    _, made = new_graphs(lambda: x * 3.5)
    result, made = new_graphs(lambda: x * 7.25)
    assert made == 0  # a new value of the same kind: same graph
    assert torch.equal(result, cpu * 7.25)


def test_output_types_are_part_of_the_node_hash():
    x = torch.ones(3, device="pjrt", dtype=torch.int32)
    as_int, _ = new_graphs(lambda: x.sum(dtype=torch.int64))
    as_double, made = new_graphs(lambda: x.sum(dtype=torch.float64))
    assert as_int.dtype == torch.int64 and as_double.dtype == torch.float64
    assert made >= 1 and as_double.item() == 3.0


def test_input_shapes_and_types_are_part_of_the_graph_key():
    made = {}
    for shape, dtype in [((3,), torch.float32), ((4,), torch.float32), ((2, 2), torch.float32),
                         ((3,), torch.float64), ((3,), torch.float32)]:
        result, made[(shape, dtype)] = new_graphs(lambda: program(torch.ones(shape, device="pjrt", dtype=dtype)))
        assert torch.equal(result, program(torch.ones(shape, dtype=dtype)))
    assert made[((4,), torch.float32)] >= 1
    assert made[((2, 2), torch.float32)] >= 1
    assert made[((3,), torch.float64)] >= 1
    assert made[((3,), torch.float32)] == 0  # the first shape and type again: found


def test_disk_fingerprint_covers_versions_plugin_capabilities_flags_and_host():
    code = """
        import torch
        torch.ones(1, device="pjrt")
        print(torch.pjrt._C._fingerprint())
    """
    plain = run_python(code).stdout
    for part in ("torch_pjrt=", "build=", "plugin=cpu", "library=", "platform=", "api=", "kind=", "host=",
                 "cap.fast_transposed_matmul=", "XLA_FLAGS="):
        assert part in plain, part
    flagged = run_python(code, env={"XLA_FLAGS": "--xla_cpu_enable_fast_math=false"}).stdout
    assert flagged != plain and "--xla_cpu_enable_fast_math=false" in flagged
