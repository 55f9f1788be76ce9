"""humming-matrix: guards humming-kernels upgrades in vLLM with paired GSM8K and kernel checks."""

__version__ = "0.1.0"
