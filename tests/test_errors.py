"""Bad input gets a clear Python exception naming the problem, never a crash, and never breaks
`import torch`: missing or broken plugins, bad device indices, unsupported dtypes, compiler
errors."""
import importlib.util
import os
import subprocess

import pytest
import torch

from helpers import run_python

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures")


def pjrt_include():
    spec = importlib.util.find_spec("xla_plugins.xla_cpu_pjrt")
    return os.path.join(list(spec.submodule_search_locations)[0], "include")


@pytest.fixture(scope="module")
def fake_plugins(tmp_path_factory):
    """Broken PJRT plugins, compiled from tests/fixtures/fake_pjrt_plugin.c."""
    out = tmp_path_factory.mktemp("fake_plugins")
    built = {}
    for name, flag in [("bad_version", "-DBAD_VERSION"), ("fail_init", "-DFAIL_INIT"),
                       ("fail_client", "-DFAIL_CLIENT")]:
        so = out / f"libfake_{name}.so"
        subprocess.run(["gcc", "-shared", "-fPIC", flag, "-I", pjrt_include(),
                        os.path.join(FIXTURES, "fake_pjrt_plugin.c"), "-o", str(so)], check=True)
        built[name] = str(so)
    return built


PROBE = """
    import torch
    print("import ok")
    try:
        torch.ones(2, device="pjrt")
        print("used plugin:", torch.pjrt.plugin())
    except RuntimeError as e:
        print("RuntimeError:", e)
"""


def probe(env):
    return run_python(PROBE, env=env).stdout


def test_missing_plugin_library_selected_explicitly():
    out = probe({"TORCH_PJRT_PLUGIN_LIBRARY": "/nonexistent/libvendor_pjrt.so", "PJRT_DEVICE": "custom"})
    assert "import ok" in out
    assert "RuntimeError" in out and "custom" in out and "/nonexistent/libvendor_pjrt.so" in out


def test_missing_plugin_library_is_skipped_otherwise():
    out = probe({"TORCH_PJRT_PLUGIN_LIBRARY": "/nonexistent/libvendor_pjrt.so"})
    assert "used plugin: cpu" in out


def test_library_without_get_pjrt_api():
    libm = "/lib/x86_64-linux-gnu/libm.so.6"
    if not os.path.exists(libm):
        pytest.skip("no libm at the usual path")
    out = probe({"TORCH_PJRT_PLUGIN_LIBRARY": libm, "PJRT_DEVICE": "custom"})
    assert "is not a PJRT plugin (it does not export GetPjrtApi)" in out


def test_incompatible_api_version(fake_plugins):
    out = probe({"TORCH_PJRT_PLUGIN_LIBRARY": fake_plugins["bad_version"], "PJRT_DEVICE": "custom"})
    assert "incompatible PJRT C API version 99." in out


def test_plugin_that_fails_to_initialize(fake_plugins):
    out = probe({"TORCH_PJRT_PLUGIN_LIBRARY": fake_plugins["fail_init"], "PJRT_DEVICE": "custom"})
    assert "failed to initialize" in out and "no accelerator found on this host" in out


def test_client_that_fails_to_start(fake_plugins):
    out = probe({"TORCH_PJRT_PLUGIN_LIBRARY": fake_plugins["fail_client"], "PJRT_DEVICE": "custom"})
    assert "could not start a client" in out and "device is busy" in out


def test_failing_plugin_is_skipped_when_not_requested(fake_plugins):
    proc = run_python(PROBE, env={"TORCH_PJRT_PLUGIN_LIBRARY": fake_plugins["fail_client"]})
    assert "used plugin: cpu" in proc.stdout
    assert "device is busy -- skipping it" in proc.stderr


def test_the_error_is_the_same_on_every_use(fake_plugins):
    out = run_python("""
        import torch
        for _ in range(2):
            try:
                torch.zeros(1, device="pjrt")
            except RuntimeError as e:
                print("E:", str(e).splitlines()[0])
    """, env={"TORCH_PJRT_PLUGIN_LIBRARY": fake_plugins["fail_init"], "PJRT_DEVICE": "custom"}).stdout
    lines = [l for l in out.splitlines() if l.startswith("E:")]
    assert len(lines) == 2 and lines[0] == lines[1]


def test_unknown_pjrt_device_lists_the_plugins():
    out = probe({"PJRT_DEVICE": "quantum"})
    assert "PJRT_DEVICE='quantum' names no installed torch_pjrt sub-plugin" in out
    assert "cpu: available" in out


def test_unavailable_pjrt_device_names_the_alternatives():
    out = probe({"PJRT_DEVICE": "tpu"})
    assert "cannot run here" in out and "Available: cpu" in out


def test_unsupported_dtype_is_a_type_error():
    with pytest.raises(TypeError, match="pjrt tensors cannot hold dtype ComplexHalf"):
        torch.empty(2, dtype=torch.complex32, device="pjrt")


def test_compiler_errors_become_exceptions():
    with pytest.raises(RuntimeError, match=r"failed to compile a graph: -:1:\d+: error: .*frobnicate"):
        torch.pjrt._C._compile_stablehlo(
            "module { func.func @main(%a: tensor<2xf32>) -> tensor<2xf32> { "
            "%0 = stablehlo.frobnicate %a : tensor<2xf32>\n return %0 : tensor<2xf32> } }")


def test_shape_errors_are_torchs_own():
    x = torch.ones(2, 3, device="pjrt")
    with pytest.raises(RuntimeError, match="must match the size"):
        x + torch.ones(4, 5, device="pjrt")
    with pytest.raises(RuntimeError, match="mat1 and mat2 shapes cannot be multiplied"):
        x @ torch.ones(2, 3, device="pjrt")
    with pytest.raises(RuntimeError, match="can't be cast to the desired output type"):
        torch.ones(2, dtype=torch.int64, device="pjrt").add_(torch.ones(2, device="pjrt") * 0.5)
