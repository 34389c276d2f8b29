"""setuptools' build step, extended by one thing pyproject.toml cannot say: the start-up file
rankstat-autoload.pth goes to the top of site-packages (a .pth file runs only from there), so that
RANKSTAT_SGLANG=1 / RANKSTAT_VLLM=1 switch rankstat on in every engine process (docs/sglang.md)."""

import os

from setuptools import setup
from setuptools.command.build_py import build_py

STARTUP_FILE = "rankstat-autoload.pth"


class BuildWithStartupFile(build_py):
    def run(self):
        super().run()
        here = os.path.dirname(os.path.abspath(__file__))
        self.copy_file(os.path.join(here, STARTUP_FILE), os.path.join(self.build_lib, STARTUP_FILE))

    def get_outputs(self, include_bytecode=True):
        return super().get_outputs(include_bytecode) + [os.path.join(self.build_lib, STARTUP_FILE)]


setup(cmdclass={"build_py": BuildWithStartupFile})
