"""Package list for setuptools (everything else is in pyproject.toml).

The board and firmware data lives at the top level, ``firmware_layouts/``, so that a user
adding a board edits it in place; an editable install reads it there and the wheel ships it
as the package ``kflashpy.firmware_layouts``. pyproject.toml alone cannot map one package
outside its parent's folder while still finding the others, hence this file.
"""

from setuptools import find_packages, setup

setup(
    packages=[*find_packages(include=["kflashpy", "kflashpy.*"]), "kflashpy.firmware_layouts"],
    package_dir={"kflashpy.firmware_layouts": "firmware_layouts"},
)
