"""Sub-plugin discovery, selection and the built-in plugins' option building, without GPUs or
TPUs: entry points and hardware probes are faked; no library is loaded."""
import importlib.metadata
import os
import sys
import types
import warnings

import pytest
import torch

from torch_pjrt.backends import DevicePlugin, base, cuda, registry, tpu
from helpers import run_python


class GoodPlugin(DevicePlugin):
    priority = 10

    def library_path(self):
        return "/nonexistent/libgood.so"


class UnavailablePlugin(DevicePlugin):
    priority = 500

    def library_path(self):
        return "/nonexistent/libnone.so"

    def is_available(self):
        return False

    def unavailable_reason(self):
        return "no such chip on this host"


class RaisingProbePlugin(DevicePlugin):
    def library_path(self):
        return "/x.so"

    def is_available(self):
        raise OSError("driver crashed")


class NotAPlugin:
    pass


@pytest.fixture
def fake_entry_points(monkeypatch):
    """Replaces the environment's torch_pjrt.plugins entry points; restores discovery after."""
    module = types.ModuleType("fake_vendor_plugins")
    for cls in (GoodPlugin, UnavailablePlugin, RaisingProbePlugin, NotAPlugin):
        setattr(module, cls.__name__, cls)
    monkeypatch.setitem(sys.modules, "fake_vendor_plugins", module)

    def install(*pairs):
        eps = [importlib.metadata.EntryPoint(name, value, registry.ENTRY_POINT_GROUP) for name, value in pairs]
        monkeypatch.setattr(importlib.metadata, "entry_points",
                            lambda group=None: [e for e in eps if group in (None, e.group)])
        monkeypatch.delenv("PJRT_DEVICE", raising=False)
        monkeypatch.delenv("TORCH_PJRT_PLUGIN_LIBRARY", raising=False)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            records = registry.discover(refresh=True)
        install.warnings = [str(w.message) for w in caught]
        return records

    yield install
    monkeypatch.undo()
    registry.discover(refresh=True)


def test_every_entry_point_is_found_and_broken_ones_are_reported(fake_entry_points):
    records = fake_entry_points(
        ("good", "fake_vendor_plugins:GoodPlugin"),
        ("gone", "fake_vendor_plugins:UnavailablePlugin"),
        ("missing", "no_such_vendor_module:Plugin"),
        ("wrongtype", "fake_vendor_plugins:NotAPlugin"),
        ("flaky", "fake_vendor_plugins:RaisingProbePlugin"),
    )
    assert set(records) == {"good", "gone", "missing", "wrongtype", "flaky"}
    assert records["good"].available and records["good"].plugin.name == "good"
    assert records["gone"].reason == "no such chip on this host"
    assert "ModuleNotFoundError" in records["missing"].error and "no_such_vendor_module" in records["missing"].error
    assert "not a torch_pjrt.backends.DevicePlugin" in records["wrongtype"].error
    assert "driver crashed" in records["flaky"].error
    # One warning per broken plugin, naming it and the cause.
    warned = "\n".join(fake_entry_points.warnings)
    assert len(fake_entry_points.warnings) == 3
    for name in ("'missing'", "'wrongtype'", "'flaky'"):
        assert f"sub-plugin {name}" in warned
    # Broken and unavailable ones are skipped; the highest available priority comes first.
    assert [r.name for r in registry.candidates()] == ["good"]


def test_pjrt_device_selects_and_explains(fake_entry_points, monkeypatch):
    fake_entry_points(("good", "fake_vendor_plugins:GoodPlugin"),
                      ("gone", "fake_vendor_plugins:UnavailablePlugin"))
    monkeypatch.setenv("PJRT_DEVICE", "GOOD")  # case-insensitive, like PJRT_DEVICE=TPU
    assert [r.name for r in registry.candidates()] == ["good"]
    monkeypatch.setenv("PJRT_DEVICE", "gone")
    with pytest.raises(RuntimeError, match=r"cannot run here: gone: unavailable \(no such chip on this host\)\. Available: good"):
        registry.candidates()
    monkeypatch.setenv("PJRT_DEVICE", "nope")
    with pytest.raises(RuntimeError, match="names no installed torch_pjrt sub-plugin. Found: good: available"):
        registry.candidates()


def test_candidate_config_carries_options_and_capabilities(fake_entry_points, monkeypatch):
    fake_entry_points(("good", "fake_vendor_plugins:GoodPlugin"))
    monkeypatch.setattr(GoodPlugin, "supported_dtypes", frozenset({torch.float32, "int32"}), raising=False)
    monkeypatch.setattr(GoodPlugin, "dense_gather", False, raising=False)
    candidate = registry.candidate_config(0)
    assert candidate["library_path"] == "/nonexistent/libgood.so"
    assert candidate["capabilities"] == {"supported_dtypes": "float32,int32", "unsupported_dtype_policy": "error",
                                         "dense_gather": "0", "fast_transposed_matmul": "1", "nan_propagating_min_max": "1",
                                         "fast_reductions": "1", "fast_transcendentals": "1", "amp_dtypes": "bfloat16,float16", "host_kernels": "0",
                                         "host_memory": "0"}
    assert candidate["strict"] is False
    assert registry.candidate_config(1) is None


def test_plugin_whose_configuration_fails_is_skipped(fake_entry_points, monkeypatch):
    fake_entry_points(("good", "fake_vendor_plugins:GoodPlugin"))

    def boom(self):
        raise RuntimeError("firmware too old")

    monkeypatch.setattr(GoodPlugin, "configure_single_process", boom)
    with pytest.warns(RuntimeWarning, match="sub-plugin 'good' is skipped: configuring it raised RuntimeError: firmware too old"):
        skipped = registry.candidate_config(0)
    assert skipped["skip"] == "sub-plugin 'good' could not be configured: RuntimeError: firmware too old"
    monkeypatch.setenv("PJRT_DEVICE", "good")
    with pytest.raises(RuntimeError, match="sub-plugin 'good' could not be configured: RuntimeError: firmware too old"):
        registry.candidate_config(0)


class RecordingPlugin(GoodPlugin):
    """Records its configure calls in the environment (where real plugins leave their marks)."""

    def configure_single_process(self):
        os.environ["TORCH_PJRT_TEST_CONFIGURED"] = os.environ.get("TORCH_PJRT_TEST_CONFIGURED", "") + self.name + ";"


def test_only_the_candidate_being_tried_is_configured(fake_entry_points, monkeypatch):
    class First(RecordingPlugin):
        priority = 20

    class Second(RecordingPlugin):
        priority = 10

    sys.modules["fake_vendor_plugins"].First = First
    sys.modules["fake_vendor_plugins"].Second = Second
    monkeypatch.setenv("TORCH_PJRT_TEST_CONFIGURED", "")
    fake_entry_points(("first", "fake_vendor_plugins:First"), ("second", "fake_vendor_plugins:Second"))
    assert registry.candidate_config(0)["name"] == "first"
    assert os.environ["TORCH_PJRT_TEST_CONFIGURED"] == "first;"
    # The runtime asks for the second only if the first fails to start.
    assert registry.candidate_config(1)["name"] == "second"
    assert os.environ["TORCH_PJRT_TEST_CONFIGURED"] == "first;second;"


def test_a_fallback_candidate_is_never_configured_when_the_best_one_starts():
    out = run_python("""
        import importlib.metadata, os, sys, types, warnings
        from torch_pjrt.backends import DevicePlugin, registry

        class Spare(DevicePlugin):
            priority = -5  # below the CPU plugin: tried only if it fails
            def library_path(self):
                return "/nonexistent/spare.so"
            def configure_single_process(self):
                os.environ["SPARE_CONFIGURED"] = "1"

        module = types.ModuleType("spare_plugin")
        module.Spare = Spare
        sys.modules["spare_plugin"] = module
        real = importlib.metadata.entry_points
        extra = importlib.metadata.EntryPoint("spare", "spare_plugin:Spare", registry.ENTRY_POINT_GROUP)
        importlib.metadata.entry_points = lambda group=None: (
            list(real(group=group)) + ([extra] if group == registry.ENTRY_POINT_GROUP else []))
        import torch
        registry.discover(refresh=True)
        torch.ones(1, device="pjrt")
        print(torch.pjrt.plugin(), os.environ.get("SPARE_CONFIGURED", "never"))
    """, env={"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}).stdout
    assert out.split() == ["cpu", "never"]


def test_invalid_capabilities_name_the_plugin():
    with pytest.raises(ValueError, match="sub-plugin 'x' declares an invalid capability: 'float99' is not a torch dtype"):
        base.capability_strings("x", {"supported_dtypes": ["float99"]})
    with pytest.raises(ValueError, match="unsupported_dtype_policy must be one of"):
        base.capability_strings("x", {"unsupported_dtype_policy": "downcast"})
    with pytest.raises(ValueError, match="default_matmul_precision must be one of"):
        base.capability_strings("x", {"default_matmul_precision": "tf32"})
    with pytest.raises(ValueError, match="amp_dtypes may hold bfloat16 and float16 only"):
        base.capability_strings("x", {"amp_dtypes": ["float32"]})
    assert base.capability_strings("x", {"supported_dtypes": [torch.double, "torch.float"],
                                         "default_matmul_precision": "high"}) == {
        "supported_dtypes": "float32,float64", "unsupported_dtype_policy": "error",
        "dense_gather": "1", "fast_transposed_matmul": "1", "nan_propagating_min_max": "1", "fast_reductions": "1",
        "fast_transcendentals": "1", "matmul_precision": "high",
        "amp_dtypes": "", "host_kernels": "0", "host_memory": "0"}


def test_builtin_plugins_declare_valid_capabilities():
    for plugin in (registry.plugin("cpu"), cuda.CudaPlugin(), tpu.TpuPlugin()):
        plugin.runtime_capabilities()
    assert tpu.TpuPlugin().capabilities()["dense_gather"] is False
    assert "float64" not in tpu.TpuPlugin().capabilities()["supported_dtypes"]


def test_plugin_listing_and_active_plugin():
    listing = torch.pjrt.plugins()
    assert listing["cpu"]["available"] and listing["cpu"]["priority"] == 0
    assert listing["cuda"]["available"] is False and listing["cuda"]["reason"]
    assert listing["tpu"]["available"] is False and "TPU" in listing["tpu"]["reason"]
    assert torch.pjrt.plugin() == "cpu"


# ---------------------------------------------------------------------------------- cuda


@pytest.fixture
def fake_gpus(monkeypatch, tmp_path):
    lib = tmp_path / "xla_cuda_plugin.so"
    lib.write_bytes(b"")
    monkeypatch.setenv("TORCH_PJRT_CUDA_LIBRARY", str(lib))
    monkeypatch.setattr(cuda, "_gpu_count", lambda: 4)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    return str(lib)


def test_cuda_unavailable_without_gpu_says_why(monkeypatch):
    monkeypatch.setattr(cuda, "_gpu_count", lambda: 0)
    monkeypatch.setattr(cuda, "_find_library", lambda: "/some/xla_cuda_plugin.so")
    p = cuda.CudaPlugin()
    assert not p.is_available() and "no NVIDIA GPU visible" in p.unavailable_reason()
    monkeypatch.setattr(cuda, "_find_library", lambda: None)
    assert "pip install torch_pjrt[cuda]" in p.unavailable_reason()
    with pytest.raises(RuntimeError, match="no CUDA PJRT plugin installed"):
        p.library_path()


def test_cuda_finds_plugin_packages(monkeypatch, tmp_path):
    monkeypatch.delenv("TORCH_PJRT_CUDA_LIBRARY", raising=False)
    pkg = tmp_path / "jax_plugins" / "xla_cuda12"
    pkg.mkdir(parents=True)
    (tmp_path / "jax_plugins" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "xla_cuda_plugin.so").write_bytes(b"")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert cuda._find_library() == str(pkg / "xla_cuda_plugin.so")


def test_cuda_options_single_and_per_rank(fake_gpus, monkeypatch):
    p = cuda.CudaPlugin()
    assert p.is_available() and p.physical_chip_count() == 4 and p.library_path() == fake_gpus
    p.configure_single_process()
    options = p.client_create_options()
    assert options["platform_name"] == "cuda" and options["preallocate"] is False
    assert "visible_devices" not in options
    p.configure_multiprocess(2, 4)
    assert p.client_create_options()["visible_devices"] == [2]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,1")
    p.configure_multiprocess(1, 2)
    assert p.client_create_options()["visible_devices"] == [1]


# ---------------------------------------------------------------------------------- tpu


def test_tpu_library_from_libtpu_package(monkeypatch, tmp_path):
    monkeypatch.delenv("TPU_LIBRARY_PATH", raising=False)
    pkg = tmp_path / "libtpu"
    pkg.mkdir()
    (pkg / "libtpu.so").write_bytes(b"")
    (pkg / "__init__.py").write_text(
        "import os\ndef get_library_path():\n    return os.path.join(os.path.dirname(__file__), 'libtpu.so')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "libtpu", raising=False)
    assert tpu._find_library() == str(pkg / "libtpu.so")
    monkeypatch.setenv("TPU_LIBRARY_PATH", "/opt/custom/libtpu.so")
    assert tpu._find_library() == "/opt/custom/libtpu.so"


def test_tpu_availability_and_topology_env(monkeypatch):
    monkeypatch.setattr(tpu, "_tpu_chips", lambda: 0)
    p = tpu.TpuPlugin()
    assert not p.is_available() and "no TPU chips on the PCI bus" in p.unavailable_reason()
    monkeypatch.setattr(tpu, "_tpu_chips", lambda: 4)
    monkeypatch.setattr(tpu, "_find_library", lambda: "/lib/libtpu.so")
    assert p.is_available() and p.physical_chip_count() == 4
    for var in ("TPU_VISIBLE_CHIPS", "TPU_CHIPS_PER_PROCESS_BOUNDS", "TPU_PROCESS_BOUNDS",
                "TPU_PROCESS_PORT", "TPU_PROCESS_ADDRESSES", "CLOUD_TPU_TASK_ID"):
        monkeypatch.delenv(var, raising=False)
    p.configure_multiprocess(2, 4)
    assert os.environ["TPU_VISIBLE_CHIPS"] == "2"
    assert os.environ["TPU_PROCESS_BOUNDS"] == "4,1,1"
    assert os.environ["TPU_PROCESS_PORT"] == "8478"
    assert os.environ["TPU_PROCESS_ADDRESSES"].split(",")[3] == "localhost:8479"
    assert os.environ["CLOUD_TPU_TASK_ID"] == "2"


# ------------------------------------------------------------------ plugin given by path only


def test_path_plugin_with_options_and_capabilities():
    import xla_plugins.xla_cpu_pjrt as pkg

    so = os.path.join(list(pkg.__path__)[0], "xla_cpu_pjrt.so")
    out = run_python("""
        import torch
        print(torch.pjrt.plugin(), torch.pjrt.device_count(), torch.pjrt.capabilities()["dense_gather"])
        try:
            torch.ones(1, dtype=torch.float64, device="pjrt")
        except TypeError as e:
            print("TypeError:", e)
    """, env={"TORCH_PJRT_PLUGIN_LIBRARY": so, "TORCH_PJRT_PLUGIN_NAME": "mychip",
              "TORCH_PJRT_PLUGIN_OPTIONS": '{"cpu_device_count": 3}',
              "TORCH_PJRT_PLUGIN_CAPABILITIES": '{"supported_dtypes": ["float32", "int64"], "dense_gather": false}'}).stdout
    assert "mychip 3 False" in out
    assert "TypeError: pjrt: the 'mychip' device does not support torch.float64 tensors" in out


def test_path_plugin_with_bad_capabilities_is_reported():
    out = run_python("""
        import torch
        print(torch.pjrt.plugins()["mychip"]["reason"])
    """, env={"TORCH_PJRT_PLUGIN_LIBRARY": "/x.so", "TORCH_PJRT_PLUGIN_NAME": "mychip",
              "TORCH_PJRT_PLUGIN_CAPABILITIES": '{"speed": "fast"}'}).stdout
    assert "TORCH_PJRT_PLUGIN_CAPABILITIES: unknown capability 'speed'" in out


# ---------------------------------------------------------------------------------- cpu


CPU_FLAGS = ("--xla_cpu_copy_insertion_use_region_analysis=true --xla_cpu_enable_fast_min_max=true "
             "--xla_cpu_use_xnnpack=false")
if torch.backends.cpu.get_cpu_capability() == "AVX512":  # 512-bit vectors where the host has them
    CPU_FLAGS += " --xla_cpu_prefer_vector_width=512"


def test_cpu_plugin_sets_its_xla_flags_unless_the_user_chose(monkeypatch):
    from torch_pjrt.backends import cpu

    monkeypatch.setenv("XLA_FLAGS", "--xla_dump_to=/tmp/x")
    cpu.CpuPlugin().configure_single_process()
    assert os.environ["XLA_FLAGS"] == "--xla_dump_to=/tmp/x " + CPU_FLAGS
    cpu.CpuPlugin().configure_multiprocess(0, 2)  # idempotent
    assert os.environ["XLA_FLAGS"].count("region_analysis") == 1
    assert os.environ["XLA_FLAGS"].count("fast_min_max") == 1
    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_copy_insertion_use_region_analysis=false")
    cpu.CpuPlugin().configure_single_process()
    assert os.environ["XLA_FLAGS"] == "--xla_cpu_copy_insertion_use_region_analysis=false " + CPU_FLAGS.split(" ", 1)[1]
    # Set before the client starts, where the plugin reads it.
    out = run_python("""
        import os, torch
        before = os.environ.get("XLA_FLAGS", "")
        torch.ones(1, device="pjrt")
        print(repr(before), repr(os.environ["XLA_FLAGS"]))
    """, env={"XLA_FLAGS": ""}).stdout
    assert out.strip() == "'' '" + CPU_FLAGS + "'"


def test_cpu_plugin_asks_for_512_bit_vectors_only_where_torch_uses_avx512():
    script = """
        import os, torch
        torch.ones(1, device="pjrt")
        print(torch.backends.cpu.get_cpu_capability(), "prefer_vector_width=512" in os.environ["XLA_FLAGS"])
    """
    capability, wide = run_python(script, env={"XLA_FLAGS": ""}).stdout.split()
    assert wide == str(capability == "AVX512")
    # ATEN_CPU_CAPABILITY lowers torch's kernels to AVX2; XLA's generated code follows.
    assert run_python(script, env={"XLA_FLAGS": "", "ATEN_CPU_CAPABILITY": "avx2"}).stdout.split() == ["AVX2", "False"]


XLA_POOL_SIZE = """
    import os, torch
    {setup}
    torch.ones(1, device="pjrt").sum().item()
    names = [open(f"/proc/self/task/{{t}}/comm").read().strip() for t in os.listdir("/proc/self/task")]
    print(names.count("tf_XLAEigen"), torch.get_num_threads(), len(os.sched_getaffinity(0)))
"""


def xla_pool_size(setup="", env=None):
    """XLA's worker threads in a fresh one-device process (XLA gives each device a thread at
    least), torch's thread count there, and its CPUs."""
    env = dict({"TORCH_PJRT_SMALL_PROGRAM_WORK": "0"}, **(env or {}), TORCH_PJRT_CPU_DEVICE_COUNT="1")
    out = run_python(XLA_POOL_SIZE.format(setup=setup), env=env).stdout.split()
    return tuple(int(v) for v in out)


def test_the_cpu_plugins_pool_follows_torch_set_num_threads():
    # XLA's pool gets no more threads than torch's intra-op pool (set before the first pjrt op),
    # nor more than the CPUs the process may use (XLA's own default).
    assert xla_pool_size("torch.set_num_threads(1)")[0] == 1
    pool, threads, cpus = xla_pool_size()
    assert pool == min(threads, cpus)
    # A user's PJRT_NPROC wins; one inherited from a parent's torch_pjrt does not.
    assert xla_pool_size("torch.set_num_threads(1)", env={"PJRT_NPROC": "2"})[0] == 2
    pool, threads, cpus = xla_pool_size(env={"PJRT_NPROC": "1", "_TORCH_PJRT_OWN_PJRT_NPROC": "1"})
    assert pool == min(threads, cpus)
