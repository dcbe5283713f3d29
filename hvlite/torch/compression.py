"""`hvd.Compression`: hvlite's compressors when present, else only the no-op one."""
try:
    from hvlite.compression import Compression
except ImportError:
    class _NoneCompressor:
        """Leaves the tensor as it is."""

        @staticmethod
        def compress(tensor):
            return tensor, None

        @staticmethod
        def decompress(tensor, ctx):
            return tensor

    class Compression:
        """Gradient compression for allreduce; this build has no compressor but `none`."""
        none = _NoneCompressor

__all__ = ["Compression"]
