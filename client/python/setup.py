"""setuptools' build step, extended by what pyproject.toml cannot say: the start-up file
rankstat-autoload.pth goes to the top of site-packages (a .pth file runs only from there), so that
RANKSTAT_SGLANG=1 / RANKSTAT_VLLM=1 switch rankstat on in every engine process (docs/sglang.md); and the
version is the repository's VERSION file, copied into the package for rankstat/_version.py."""

import os

from setuptools import setup
from setuptools.command.build_py import build_py

STARTUP_FILE = "rankstat-autoload.pth"
HERE = os.path.dirname(os.path.abspath(__file__))
VERSION_FILE = os.path.join(HERE, "..", "..", "VERSION")


def version() -> str:
    with open(VERSION_FILE) as f:
        return f.readline().strip()


class BuildWithStartupFile(build_py):
    def run(self):
        super().run()
        self.copy_file(os.path.join(HERE, STARTUP_FILE), os.path.join(self.build_lib, STARTUP_FILE))
        self.copy_file(VERSION_FILE, os.path.join(self.build_lib, "rankstat", "VERSION"))

    def get_outputs(self, include_bytecode=True):
        return super().get_outputs(include_bytecode) + [os.path.join(self.build_lib, STARTUP_FILE),
                                                         os.path.join(self.build_lib, "rankstat", "VERSION")]


setup(version=version(), cmdclass={"build_py": BuildWithStartupFile})
