"""The slangpy backends' shared pieces (lowering.backends.slangpy_base)."""
import numpy as np

from symdiff.lowering.backends import slangpy_base


class _FakeBuffer:
    def __init__(self, address: int, data: np.ndarray):
        self.device_address, self.data = address, data

    def to_numpy(self) -> np.ndarray:
        return self.data


class _FakeDevice:
    """A device whose buffers claim ``address``: what a hardware GPU's device address looks like to the host."""

    def __init__(self, address):
        self.address = address

    def create_buffer(self, size, data, usage):
        return _FakeBuffer(self.address(data) if callable(self.address) else self.address, data.copy())

    def wait(self):
        pass


def test_probe_refuses_addresses_that_are_not_the_buffers_host_memory():
    """lavapipe's buffers are taken as host memory only once checked: an address
    mapped nowhere here, or mapped memory holding other bytes, is refused."""
    probe = slangpy_base.addresses_are_host_pointers
    assert not probe(_FakeDevice(0x10))  # unmapped: never dereferenced
    elsewhere = np.zeros(64, np.uint32)  # mapped and writable, but not the buffer's bytes
    assert not probe(_FakeDevice(elsewhere.ctypes.data))
    assert not elsewhere.any()  # nothing written through a refused address
    same = np.zeros(64, np.uint32)  # holds the buffer's bytes, but a write through it misses the buffer
    assert not probe(_FakeDevice(lambda data: (same.__setitem__(slice(None), data), same.ctypes.data)[1]))
