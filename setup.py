"""Builds the native core (``edgevlm._native``) with cffi; everything else is in pyproject.toml."""

from setuptools import setup

setup(cffi_modules=["native/build_ffi.py:ffibuilder"])
