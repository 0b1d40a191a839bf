# Stand-in for ROLL's setup.py: the adapter reads the version from here.
from setuptools import setup

setup(name="roll", version="0.0.0+standin", packages=[])
