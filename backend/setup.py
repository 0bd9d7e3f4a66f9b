"""Build of the echo_npu C++ extension against the installed torch (its own package: the suite,
torch-conformance, is pure Python and never compiles echo_npu).

Install with ``pip install --no-build-isolation -e backend`` from the repository root (an
isolated build would pull another torch); rebuild in place with
``python setup.py build_ext --inplace`` from this folder.
Environment: ``MAX_JOBS`` (default 2) compile jobs; ``ECHO_NPU_ASAN=1`` builds with ASan.
"""

import glob
import os
import runpy

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension

os.environ.setdefault("MAX_JOBS", "2")

ROOT = os.path.dirname(os.path.abspath(__file__))
CSRC = "csrc"
INCLUDE = os.path.join(ROOT, "echo_npu", "include")  # shipped: Inductor's C++ wrapper includes it
# AOTInductor's C shims for npu, generated from this torch's torchgen (csrc/aoti/generate.py)
AOTI = os.path.join(ROOT, CSRC, "aoti")
runpy.run_path(os.path.join(AOTI, "generate.py"))["write"](
    os.path.join(INCLUDE, "echo_npu", "c_shim_npu.h"), os.path.join(AOTI, "c_shim_npu.cpp")
)
sources = sorted(
    os.path.relpath(p, ROOT)
    for sub in ("runtime", "kernels", "device", "aten", "aoti", "python")
    for p in glob.glob(os.path.join(ROOT, CSRC, sub, "*.cpp"))
)

cxx_flags = ["-O2", "-g0", "-fwrapv", "-Wno-unused-parameter"]
link_flags = []
if os.environ.get("ECHO_NPU_ASAN") == "1":
    cxx_flags = ["-fsanitize=address", "-fno-omit-frame-pointer", "-g", "-O1", "-fwrapv"]
    link_flags = ["-fsanitize=address"]

setup(
    ext_modules=[
        CppExtension(
            name="echo_npu._C",
            sources=sources,
            include_dirs=[os.path.join(ROOT, CSRC), INCLUDE],
            extra_compile_args={"cxx": cxx_flags},
            extra_link_args=link_flags,
        )
    ],
    cmdclass={"build_ext": BuildExtension.with_options(use_ninja=True)},
)
