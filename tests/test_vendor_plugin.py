"""The worked vendor example (examples/vendor_plugin) as a user meets it: built and installed
into a fresh virtual environment, found through its entry point, selected with PJRT_DEVICE,
training a model, with its capabilities honoured."""
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import textwrap

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE = os.path.join(REPO, "examples", "vendor_plugin")


@pytest.fixture(scope="module")
def vendor_venv(tmp_path_factory):
    """A fresh venv that sees this environment's packages (torch, torch_pjrt) through a .pth
    file, with the example plugin pip-installed into the venv itself."""
    root = tmp_path_factory.mktemp("vendor")
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True)
    python = str(venv / "bin" / "python")
    site_dir = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                              check=True, capture_output=True, text=True).stdout.strip()
    with open(os.path.join(site_dir, "parent_env.pth"), "w") as f:
        f.write(f"import site; site.addsitedir({sysconfig.get_paths()['purelib']!r})\n")
    source = root / "src"
    shutil.copytree(EXAMPLE, source)  # setuptools writes build files next to the sources
    proc = subprocess.run([python, "-m", "pip", "install", "--no-deps", "--no-build-isolation",
                           "--no-index", "--disable-pip-version-check", str(source)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return python


def run_in(python, code, **env):
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("PJRT_", "TORCH_PJRT_PLUGIN"))}
    full_env.pop("TORCH_PJRT_CPU_DEVICE_COUNT", None)
    full_env.update(env)
    proc = subprocess.run([python, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          env=full_env, timeout=600)
    assert proc.returncode == 0, f"STDOUT:\n{proc.stdout}\nSTDERR:\n{proc.stderr}"
    line = [l for l in proc.stdout.splitlines() if l.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT "):]), proc.stderr


MODEL_RUN = """
import copy, glob, json, os, tempfile, warnings
import torch
from torch import nn

out = {"plugin": torch.pjrt.plugin(), "device_count": torch.pjrt.device_count(),
       "plugins": {k: v["available"] for k, v in torch.pjrt.plugins().items()},
       "capabilities": torch.pjrt.capabilities()}
dump = tempfile.mkdtemp()
torch.pjrt.set_dump_dir(dump)

class BagOfWords(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(50, 16, scale_grad_by_freq=True)
        self.fc = nn.Linear(16, 4)
    def forward(self, x):
        return self.fc(self.emb(x).mean(1))

torch.manual_seed(0)
cpu_model = BagOfWords()
dev_model = copy.deepcopy(cpu_model).to("pjrt:1")  # the second VendorX chip
x = torch.randint(0, 50, (32, 8))
y = torch.randint(0, 4, (32,))
losses = {"cpu": [], "pjrt": []}
for model, device, key in ((cpu_model, "cpu", "cpu"), (dev_model, "pjrt:1", "pjrt")):
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    for _ in range(5):
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x.to(device)), y.to(device))
        loss.backward()
        opt.step()
        losses[key].append(loss.item())
out["losses"] = losses
out["weight_diff"] = max((a.detach() - b.detach().cpu()).abs().max().item()
                         for a, b in zip(cpu_model.parameters(), dev_model.parameters()))
out["weight_device"] = str(dev_model.fc.weight.device)

try:
    torch.zeros(2, dtype=torch.float64, device="pjrt")
    out["float64"] = "created"
except TypeError as e:
    out["float64"] = str(e)

out["amp_supported"] = [str(d) for d in torch.pjrt.get_amp_supported_dtype()]
out["autocast_dtype"] = str(torch.get_autocast_dtype("pjrt"))
with torch.autocast("pjrt"):
    out["autocast_linear"] = str(dev_model.fc(torch.randn(2, 16, device="pjrt:1")).dtype)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    with torch.autocast("pjrt", dtype=torch.float16):
        pass
out["fp16_autocast_warning"] = " ".join(str(w.message) for w in caught)

torch.pjrt.synchronize()
texts = [open(p).read() for p in glob.glob(os.path.join(dump, "*.mlir"))]
out["graphs"] = len(texts)
out["any_gather"] = any("stablehlo.gather" in t or "stablehlo.scatter" in t for t in texts)
out["one_hot_dots"] = sum(t.count("precision = [HIGHEST, HIGHEST]") for t in texts)
out["high_dots"] = sum(t.count("precision = [HIGH, HIGH]") for t in texts)
print("RESULT " + json.dumps(out))
"""


def test_selected_by_pjrt_device_trains_and_honours_capabilities(vendor_venv):
    out, _ = run_in(vendor_venv, MODEL_RUN, PJRT_DEVICE="vendorx")
    assert out["plugin"] == "vendorx"
    assert out["device_count"] == 2  # its own client options
    assert out["plugins"]["vendorx"] and out["plugins"]["cpu"]
    caps = out["capabilities"]
    assert caps["dense_gather"] is False and caps["amp_dtypes"] == ["bfloat16"]
    assert "float64" not in caps["supported_dtypes"]

    # Training matches CPU eager, on the second chip.
    assert out["weight_device"] == "pjrt:1"
    assert out["losses"]["pjrt"][-1] < out["losses"]["pjrt"][0]
    for a, b in zip(out["losses"]["pjrt"], out["losses"]["cpu"]):
        assert abs(a - b) < 1e-4
    assert out["weight_diff"] < 1e-4

    # supported_dtypes + policy "error": a TypeError naming the plugin and the fix.
    assert "vendorx" in out["float64"] and "float64" in out["float64"] and "to(torch.float32)" in out["float64"]
    # amp_dtypes: bfloat16 is autocast's default and the only dtype allowed.
    assert out["amp_supported"] == ["torch.bfloat16"]
    assert out["autocast_dtype"] == "torch.bfloat16"
    assert out["autocast_linear"] == "torch.bfloat16"
    assert "not supported" in out["fp16_autocast_warning"]
    # dense_gather False: the embedding and its gradient are one-hot matmuls, no gather/scatter.
    assert out["graphs"] > 0
    assert not out["any_gather"]
    assert out["one_hot_dots"] >= 2
    # default_matmul_precision "high": the Linear layer's dots carry HIGH precision.
    assert out["high_dots"] >= 1


def test_installed_plugin_becomes_the_default_by_priority(vendor_venv):
    code = """
    import json, torch
    print("RESULT " + json.dumps({"plugin": torch.pjrt.plugin()}))
    """
    out, _ = run_in(vendor_venv, code)
    assert out["plugin"] == "vendorx"  # priority 50 beats the CPU plugin's 0
    out, _ = run_in(vendor_venv, code, PJRT_DEVICE="cpu")
    assert out["plugin"] == "cpu"


def test_multiprocess_topology_gives_one_chip_per_process(vendor_venv):
    code = """
    import json, torch
    print("RESULT " + json.dumps({"count": torch.pjrt.device_count()}))
    """
    out, _ = run_in(vendor_venv, code, PJRT_DEVICE="vendorx", LOCAL_RANK="1", LOCAL_WORLD_SIZE="2")
    assert out["count"] == 1


def test_broken_entry_point_in_the_environment_is_skipped(vendor_venv):
    """A second installed plugin whose module is gone: `import torch` is unaffected, the broken
    plugin is reported once by name, and the working one still runs."""
    site_dir = subprocess.run([vendor_venv, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                              check=True, capture_output=True, text=True).stdout.strip()
    dist = os.path.join(site_dir, "torch_pjrt_broken-1.0.dist-info")
    os.makedirs(dist)
    try:
        with open(os.path.join(dist, "METADATA"), "w") as f:
            f.write("Metadata-Version: 2.1\nName: torch-pjrt-broken\nVersion: 1.0\n")
        with open(os.path.join(dist, "entry_points.txt"), "w") as f:
            f.write("[torch_pjrt.plugins]\nbroken = torch_pjrt_broken_gone:Plugin\n")
        code = """
        import json, torch
        x = torch.ones(2, device="pjrt") * 3
        print("RESULT " + json.dumps({"plugin": torch.pjrt.plugin(), "sum": x.sum().item(),
                                      "broken": torch.pjrt.plugins()["broken"]}))
        """
        out, stderr = run_in(vendor_venv, code)
        assert out["plugin"] == "vendorx" and out["sum"] == 6.0
        assert out["broken"]["available"] is False and "torch_pjrt_broken_gone" in out["broken"]["reason"]
        assert stderr.count("sub-plugin 'broken'") == 1 and "failed to load and is skipped" in stderr
    finally:
        shutil.rmtree(dist)
