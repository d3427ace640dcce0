"""The package layout and a build hook (everything else is configured in pyproject.toml).

Packages: ``sr`` and its sub-packages (the HTTP service is sr/service/, with its web page in
sr/service/static/; the fused attention kernel's C++ source, compiled at first use, in
sr/models/attention/).

Build hook: ship weights/ inside the wheel. The top-level weights/ folder is where the project keeps
its exported weights and model card; a wheel has no top level of its own, so the build copies the
folder into the package as sr/_weights/, where sr.weights finds it after a normal (non-editable)
install, from any working directory.
"""

import shutil
from pathlib import Path

from setuptools import find_packages, setup
from setuptools.command.build_py import build_py


class BuildPyWithWeights(build_py):
    def run(self) -> None:
        super().run()
        source = Path(__file__).resolve().parent / "weights"
        target = Path(self.build_lib) / "sr" / "_weights"
        target.mkdir(parents=True, exist_ok=True)
        for f in sorted(source.glob("*.safetensors")) + [source / "README.md"]:
            if f.is_file():
                shutil.copy2(f, target / f.name)


setup(
    packages=find_packages(include=["sr", "sr.*"]),
    package_data={"sr.service": ["static/*"], "sr.models.attention": ["*.cpp"], "sr.io": ["*.pyi"]},
    cmdclass={"build_py": BuildPyWithWeights},
)
