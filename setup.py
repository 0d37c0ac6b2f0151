"""The optional C extension; everything else about the package is in pyproject.toml.

`ipy_memory._speedups` (the C files in ipy_memory/csrc) holds compiled twins of a few numpy
kernels (ipy_memory/_kernels.py). It is optional: where it cannot be built (no C compiler), the
install goes on and the numpy code runs.
"""

from glob import glob

from setuptools import Extension, setup

setup(ext_modules=[Extension("ipy_memory._speedups", sorted(glob("ipy_memory/csrc/*.c")),
                             depends=glob("ipy_memory/csrc/*.h"), optional=True)])
