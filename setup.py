"""Package discovery, the one part of the build pyproject.toml cannot say: the import package `plugrad` is
built from the folder `core/` (`package-dir` in pyproject.toml), and setuptools' declarative `find` cannot
rename what it finds, so every subpackage of core/ is listed here, found afresh at each build."""
from setuptools import find_packages, setup

setup(packages=["plugrad"] + [f"plugrad.{name}" for name in find_packages("core")])
