"""Build of torch_pjrt: one C++ extension (torch_pjrt._C) built with ninja against the PJRT C API
header shipped by the installed `xla-cpu-pjrt` wheel, plus the entry points that make
`import torch` load us and let sub-plugins register hardware.

Build with `pip install --no-build-isolation -e .` (see ci/install.sh): build isolation would
fetch a fresh, unpinned torch.
"""
import glob
import importlib.util
import os

from setuptools import Extension, find_packages, setup
from torch.utils.cpp_extension import BuildExtension, CppExtension

VERSION = "0.1.0"
ROOT = os.path.dirname(os.path.abspath(__file__))


def pjrt_include_dir():
    """The include dir of the installed xla-cpu-pjrt wheel (holding pjrt_c_api.h)."""
    spec = importlib.util.find_spec("xla_plugins.xla_cpu_pjrt")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("torch_pjrt builds against pjrt_c_api.h from the `xla-cpu-pjrt` package: "
                           "pip install xla-cpu-pjrt first")
    include = os.path.join(list(spec.submodule_search_locations)[0], "include")
    if not os.path.exists(os.path.join(include, "pjrt_c_api.h")):
        raise RuntimeError(f"pjrt_c_api.h not found in {include}")
    return include


# Python's own CFLAGS carry -g. Debug information for torch's templates made each translation
# unit ~2.5x slower to compile (43 against 17 s for a 60-line kernel file) and the library 106 MB
# instead of ~5. PyTorch's convention keeps it on request: DEBUG=1 or REL_WITH_DEB_INFO=1.
DEBUG_INFO = ["-g"] if os.environ.get("DEBUG") == "1" or os.environ.get("REL_WITH_DEB_INFO") == "1" else ["-g0"]


def sources_under(pattern):
    return sorted(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, pattern), recursive=True))


# The compile worker (torch_pjrt/csrc/runtime/compile_worker.h) is its own small library: the
# worker's entry point and the runtime's torch-free code (compile_worker/runtime_sources.cc), no torch.
WORKER_SOURCES = sources_under("torch_pjrt/csrc/compile_worker/*.cc")
sources = [s for s in sources_under("torch_pjrt/csrc/**/*.cc") if "/compile_worker/" not in s]

ext = CppExtension(
    name="torch_pjrt._C",
    sources=sources,
    include_dirs=[os.path.join(ROOT, "torch_pjrt/csrc"), pjrt_include_dir()],
    extra_compile_args=["-O2", *DEBUG_INFO, f'-DTORCH_PJRT_VERSION="{VERSION}"', "-Wno-unused-parameter"],
    libraries=["dl"],
)

worker = Extension(
    name="torch_pjrt._compile_worker",
    sources=WORKER_SOURCES,
    include_dirs=[os.path.join(ROOT, "torch_pjrt/csrc"), pjrt_include_dir()],
    extra_compile_args=["-O2", *DEBUG_INFO, "-std=c++20", "-Wno-unused-parameter"],
    libraries=["dl"],
    language="c++",
)

class IncrementalBuildExtension(BuildExtension.with_options(use_ninja=True)):
    """pip's editable build (setuptools' editable_wheel) compiles in a fresh temporary directory, so
    every `pip install -e .` rebuilt all ~100 translation units (6 min on 2 cores) for a one-file
    change. The objects and ninja's build log stay under build/ instead: ninja rebuilds what
    changed (it tracks headers and compile commands)."""

    def finalize_options(self):
        super().finalize_options()
        self.build_temp = os.path.join(ROOT, "build", "temp")


setup(
    name="torch_pjrt",
    version=VERSION,
    description="A PyTorch device backed by PJRT plugins through a lazy StableHLO graph",
    packages=find_packages(include=["torch_pjrt", "torch_pjrt.*"]),
    # The torch.backends entry point, outside the package so torch can ask it without registering.
    py_modules=["_torch_pjrt_autoload"],
    ext_modules=[ext, worker],
    cmdclass={"build_ext": IncrementalBuildExtension},
    python_requires=">=3.10",
    # Pinned: an unpinned torch pulls multi-GB CUDA builds.
    install_requires=["torch==2.13.0", "xla-cpu-pjrt"],
    extras_require={
        "cuda": ["xla-cuda12-pjrt"],
        "tpu": ["libtpu"],
    },
    entry_points={
        "torch.backends": ["torch_pjrt = _torch_pjrt_autoload:autoload"],
        # torch.compile(backend="pjrt"), found by Dynamo without importing us.
        "torch_dynamo_backends": ["pjrt = torch_pjrt.dynamo:pjrt_backend"],
        "torch_pjrt.plugins": [
            "cpu = torch_pjrt.backends.cpu:CpuPlugin",
            "cuda = torch_pjrt.backends.cuda:CudaPlugin",
            "tpu = torch_pjrt.backends.tpu:TpuPlugin",
        ],
    },
)
