"""Build hook: compile the plain-C native core and the simulator with make.

The libraries do not link against Python, so one wheel serves every Python 3
on its platform: the wheel is tagged py3-none-<platform>.
"""
import os
import subprocess

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

try:
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:  # setuptools < 70
    from wheel.bdist_wheel import bdist_wheel

HERE = os.path.dirname(os.path.abspath(__file__))


class BuildNative(build_py):
    def run(self):
        super().run()
        out = os.path.join(os.path.abspath(self.build_lib), "cudafd", "_lib")
        subprocess.check_call(["make", "-C", os.path.join(HERE, "native"), f"DEST={out}"])


class NativeWheel(bdist_wheel):
    def finalize_options(self):
        super().finalize_options()
        self.root_is_pure = False

    def get_tag(self):
        _, _, plat = super().get_tag()
        return "py3", "none", plat


class NativeDistribution(Distribution):
    def has_ext_modules(self):
        return True


setup(cmdclass={"build_py": BuildNative, "bdist_wheel": NativeWheel}, distclass=NativeDistribution)
