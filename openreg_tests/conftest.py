"""Same session setup as tests/: 4 virtual CPU devices and a private compile cache, fixed before
the PJRT client starts."""
import os
import tempfile

os.environ.setdefault("TORCH_PJRT_CPU_DEVICE_COUNT", "4")
if "PYTEST_XDIST_WORKER" in os.environ:
    # Each pytest-xdist worker (ci/test.sh runs two) compiles into a cache of its own: a graph
    # another worker cached would turn the compiles a test counts into disk loads.
    os.environ["TORCH_PJRT_CACHE_DIR"] = tempfile.mkdtemp(prefix="torch_pjrt_test_cache_")
os.environ.setdefault("TORCH_PJRT_CACHE_DIR", tempfile.mkdtemp(prefix="torch_pjrt_test_cache_"))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
