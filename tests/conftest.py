"""Test session setup: 4 virtual CPU devices (the default is 1; multi-device tests need more) and
a private persistent compile cache, both fixed before the PJRT client starts."""
import os
import sys
import tempfile

os.environ.setdefault("TORCH_PJRT_CPU_DEVICE_COUNT", "4")
os.environ.setdefault("TORCH_PJRT_CACHE_DIR", tempfile.mkdtemp(prefix="torch_pjrt_test_cache_"))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")

sys.path.insert(0, os.path.dirname(__file__))
