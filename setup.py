"""Everything about the package is in pyproject.toml; this adds one file to the wheel's root.

``rmqstore-spark.pth`` must sit in site-packages itself (Python runs a ``.pth`` file's ``import``
lines at start-up only there), which no pyproject.toml setting of setuptools can place: the build
step below copies it beside the packages. An editable install (``pip install -e``, as
``scripts/setup`` does) puts no build output in site-packages, so ``scripts/setup`` copies the file
there itself.
"""
import os

from setuptools import setup
from setuptools.command.build_py import build_py

PTH = "rmqstore-spark.pth"


class BuildPyWithPth(build_py):
    def run(self):
        super().run()
        self.copy_file(os.path.join("src", PTH), os.path.join(self.build_lib, PTH), preserve_mode=False)

    def get_outputs(self, include_bytecode=True):
        return [*super().get_outputs(include_bytecode), os.path.join(self.build_lib, PTH)]


setup(cmdclass={"build_py": BuildPyWithPth})
