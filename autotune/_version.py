"""autotune's version: one literal, read by the package (``autotune.__version__``), by the
build (pyproject.toml) and by the probe, which records it in every fingerprint without
importing the package's face."""

__version__ = "0.1.0"
