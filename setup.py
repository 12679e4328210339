"""Maps the top-level folders hw/, sim/, compiler/ and runtime/ to tensorforge.* subpackages."""

from setuptools import find_packages, setup

LAYERS = ("hw", "sim", "compiler", "runtime")

package_dir = {"tensorforge": "tensorforge"}
packages = ["tensorforge"] + [f"tensorforge.{p}" for p in find_packages("tensorforge")]
packages.append("tensorforge.data")  # the shipped model and test split (data only, no code)
for layer in LAYERS:
    package_dir[f"tensorforge.{layer}"] = layer
    packages.append(f"tensorforge.{layer}")
    packages += [f"tensorforge.{layer}.{p}" for p in find_packages(layer)]

setup(package_dir=package_dir, packages=packages)
