"""The PMU's configuration: its layout, error codes and the sizes they depend on.

One home for what the RTL (:mod:`hdl.pmu`, :mod:`hdl.pmu_beats`), the encoder
(``software/rdu/units/pmu.py``) and the functional model (``software/rdu/models/pmu.py``)
read of a PMU's configuration; the fields are described in ``docs/pmu.md`` (``hdl.pmu``
exports all of it).
"""

from amaranth import unsigned
from amaranth.lib import data, enum

__all__ = ["ADDRESS_BITS", "BOUND_BITS", "MAX_BUFFERS", "PMUError",
           "address_generator_layout", "pmu_config_layout"]

#: Width of every address, stride and range field (addresses wrap modulo 2**20, so a
#: stride of ``2**20 - k`` steps backwards by ``k``).
ADDRESS_BITS = 20
#: Width of a loop bound (iterations per level, 1..65535).
BOUND_BITS = 16
#: Most buffers an N-buffered PMU rotates through.
MAX_BUFFERS = 4


class PMUError(enum.IntEnum, shape=3):
    """Codes of the PMU's sticky ``error`` output (0 = no error)."""
    OK = 0
    BAD_CONFIG = 1         # a loop bound of 0, buffers not in 1..4, buffers overflow, bad skew
    WRITE_CONFLICT = 2     # two lanes of a write beat map to the same bank
    READ_CONFLICT = 3      # two lanes of a read beat map to the same bank
    WRITE_RANGE = 4        # a lane of a write beat falls outside its buffer
    READ_RANGE = 5         # a lane of a read beat falls outside its buffer
    SCALAR_RANGE = 6       # a scalar lookup address is beyond the capacity


def address_generator_layout():
    """Configuration of one three-level affine address generator (level 0 innermost)."""
    return data.StructLayout({
        "start": unsigned(ADDRESS_BITS),
        "stride": data.ArrayLayout(unsigned(ADDRESS_BITS), 3),
        "bound": data.ArrayLayout(unsigned(BOUND_BITS), 3),
        "lane_stride": unsigned(ADDRESS_BITS),
    })


def pmu_config_layout():
    """The PMU's configuration layout (stored by a :class:`~hdl.interfaces.ConfigRegister`)."""
    return data.StructLayout({
        "write_enable": unsigned(1),
        "read_enable": unsigned(1),
        "read_gate": unsigned(1),
        "predicate_enable": unsigned(1),
        "skew_shift": unsigned(5),
        "buffers": unsigned(3),
        "read_repeat": unsigned(8),
        "read_passes": unsigned(16),
        "buffer_words": unsigned(ADDRESS_BITS),
        "predicate_low": unsigned(ADDRESS_BITS),
        "predicate_high": unsigned(ADDRESS_BITS),
        "write": address_generator_layout(),
        "read": address_generator_layout(),
    })
