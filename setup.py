"""Package layout that ``pyproject.toml`` cannot express: the top-level ``resources/``
folder is shipped as the package ``app.resources``.

Everything else (metadata, dependencies, entry points) lives in ``pyproject.toml``.
Packages are found here rather than written out, so that a new ``app`` subpackage or a
new folder of data files is shipped without editing packaging files. Each data folder
is listed as a package of its own (``app.resources.icons`` …), as setuptools asks for
folders that Python could import.
"""

from setuptools import find_namespace_packages, setup

data_packages = ["app.resources", *(f"app.resources.{name}" for name in
                                    find_namespace_packages(where="resources"))]

setup(
    packages=[*find_namespace_packages(include=["app", "app.*"]), *data_packages],
    package_dir={"app.resources": "resources"},
    package_data={name: ["*"] for name in data_packages},
    exclude_package_data={name: ["*.pyc"] for name in data_packages},
)
