"""Test session setup: 4 virtual CPU devices (the default is 1; multi-device tests need more) and
a private persistent compile cache, both fixed before the PJRT client starts; the real-model
builders of bench/ on the path, and torchvision importable next to the CPU torch."""
import os
import sys
import tempfile

os.environ.setdefault("TORCH_PJRT_CPU_DEVICE_COUNT", "4")
if "PYTEST_XDIST_WORKER" in os.environ:
    # Each pytest-xdist worker (ci/test.sh runs two) compiles into a cache of its own: a graph
    # another worker cached would turn the compiles a test counts into disk loads.
    os.environ["TORCH_PJRT_CACHE_DIR"] = tempfile.mkdtemp(prefix="torch_pjrt_test_cache_")
os.environ.setdefault("TORCH_PJRT_CACHE_DIR", tempfile.mkdtemp(prefix="torch_pjrt_test_cache_"))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")

sys.path.insert(0, os.path.dirname(__file__))
# bench/ holds the real-model builders the model tests share with the benchmarks.
sys.path.insert(1, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench"))

from torchvision_compat import ensure_torchvision_importable  # noqa: E402

ensure_torchvision_importable()  # before anything imports timm or transformers
