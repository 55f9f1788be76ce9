"""TEST DOUBLE of `torch` for a machine without a GPU: importable, sees no CUDA device.

Put on PYTHONPATH by tests of `humming-matrix kernels`' GPU check, so they behave the same on a
developer's GPU box as on CI. It is not PyTorch and implements nothing else.
"""

__version__ = "0.0.0+double"


class cuda:  # mirrors the torch.cuda namespace
    @staticmethod
    def is_available() -> bool:
        return False
