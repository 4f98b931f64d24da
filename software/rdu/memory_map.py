"""The off-chip address map: where HBM, DDR and the host window sit behind the AGCUs.

One place for these constants: the memory models (``sim_models``), the AGCU tests,
the compiler and the runtime all import them from here. Every AGCU sees the same
map (``docs/memory.md``). Addresses outside every region get an AXI ``DECERR``.

======== ============== ============== =========================================
region   base           size (default) what lives there
======== ============== ============== =========================================
hbm      ``0x0000_0000`` 32 MiB         active weights, activations, KV cache
ddr      ``0x4000_0000`` 256 MiB        all experts / models at rest
host     ``0xC000_0000`` 64 MiB         host memory seen over the host link
======== ============== ============== =========================================

The gaps between regions are unmapped on purpose, so that a run-away address is an
error, never an alias.
"""

from dataclasses import dataclass

from hdl.agcu_engines import BURST_BOUNDARY

__all__ = ["ADDR_WIDTH", "BEAT_BYTES", "BURST_BOUNDARY", "Region",
           "HBM", "DDR", "HOST", "REGIONS", "region_of", "HBM_CHANNELS",
           "HBM_CHANNEL_BYTES_PER_CYCLE"]

#: Width of a byte address on the AGCU's AXI4 port.
ADDR_WIDTH = 32
#: Bytes per AXI beat with the default 8 lanes (256-bit data bus).
BEAT_BYTES = 32
# BURST_BOUNDARY: AXI4 bursts never cross it (the AGCU's, hdl.agcu_engines.BURST_BOUNDARY).

MiB = 1 << 20


@dataclass(frozen=True)
class Region:
    """One address window: ``[base, base + size)``."""
    name: str
    base: int
    size: int

    @property
    def end(self):
        return self.base + self.size

    def __contains__(self, address):
        return self.base <= address < self.end


#: High-bandwidth memory (SN40L: 64 GB, ~1.8 TB/s).
HBM = Region("hbm", 0x0000_0000, 32 * MiB)
#: DDR (SN40L: 1.5 TB, ~200 GB/s): about 9x less bandwidth, far larger.
DDR = Region("ddr", 0x4000_0000, 256 * MiB)
#: Host memory behind the host link (PCIe-like).
HOST = Region("host", 0xC000_0000, 64 * MiB)

REGIONS = (HBM, DDR, HOST)

#: HBM channels of the scaled machine (:func:`sim_models.memory.hbm_model`'s default).
HBM_CHANNELS = 4
#: Data bandwidth of one HBM channel in bytes per cycle (the model's default): the HBM's
#: peak is ``HBM_CHANNELS * HBM_CHANNEL_BYTES_PER_CYCLE`` (32 B a cycle, one 256-bit
#: beat; :attr:`rdu.machine.Machine.hbm_bytes_per_cycle`).
HBM_CHANNEL_BYTES_PER_CYCLE = 8.0


def region_of(address, regions=REGIONS):
    """The region holding byte ``address``, or ``None`` when it is unmapped."""
    for region in regions:
        if address in region:
            return region
    return None
