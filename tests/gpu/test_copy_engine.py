"""The copy engine's pieces that need no GPU: wrapping a stream CuPy did not make."""
import types
import warnings

from hvlite.gpu.copy_engine import external_stream, stream_of


class _Stream:
    made = []

    @classmethod
    def from_external(cls, obj):
        cls.made.append(obj.__cuda_stream__())
        return ("from_external", obj.__cuda_stream__()[1])


def _cupy(with_from_external):
    def legacy(ptr):
        warnings.warn("ExternalStream is deprecated", DeprecationWarning)
        return ("ExternalStream", ptr)
    stream = _Stream if with_from_external else type("Stream", (), {})
    return types.SimpleNamespace(cuda=types.SimpleNamespace(Stream=stream, ExternalStream=legacy))


def test_cupy_14_streams_go_through_from_external_without_a_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")          # CuPy 14 warns in ExternalStream's constructor
        assert external_stream(_cupy(True), 0x1234) == ("from_external", 0x1234)
    assert _Stream.made[-1] == (0, 0x1234)      # the CUDA stream protocol, version 0


def test_older_cupy_keeps_external_stream():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert external_stream(_cupy(False), 7) == ("ExternalStream", 7)


def test_a_described_stream_is_wrapped_and_none_means_the_current_one():
    eng = types.SimpleNamespace(cp=_cupy(True), current_stream=lambda: "current")
    assert stream_of(None, eng) == "current" and stream_of(0, eng) == "current"
    assert stream_of(2, eng) == ("from_external", 2)      # CUDA's per-thread default stream
