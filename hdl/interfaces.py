"""Shared interface signatures of the RDU tile array.

Every unit (PCU, PMU, switch, AGCU) speaks through the signatures defined here and
nowhere else, so that units built separately plug together with ``wiring.connect``.
``docs/architecture.md`` describes the same interfaces in words.

Networks
--------
* vector network: ``lanes`` x 32-bit words per beat, :func:`vector_stream`;
* scalar network: one 32-bit word per beat, :func:`scalar_stream`;
* control network: 1-bit tokens, :func:`control_stream`.

All three are ``lib.stream`` valid/ready streams (a transfer happens on a cycle where
both ``valid`` and ``ready`` are high). Per-hop credit flow control is built out of
these streams by the switches; units only ever see valid/ready.

Configuration
-------------
Each unit exposes a :class:`ConfigPort` (a small addressed register port) and keeps its
configuration in a ``lib.data`` layout; :class:`ConfigRegister` implements the port for
any layout. The array-level configuration network and the bitstream format are built
on top of it (see ``docs/bitstream.md``).

Off-chip memory
---------------
:class:`AXI4Signature` is an AXI4 memory-mapped interface made of five ``lib.stream``
channels (``aw``, ``w``, ``b``, ``ar``, ``r``) whose payloads are ``lib.data`` structs.
"""

from amaranth import Module, ResetInserter, Signal, unsigned
from amaranth.lib import data, enum, stream, wiring
from amaranth.lib.wiring import In, Out

__all__ = [
    "WORD_BITS", "NETWORKS", "check_lanes", "check_int",
    "vector_layout", "vector_stream", "scalar_stream", "control_stream",
    "ControlToken",
    "ConfigPort", "ConfigRegister", "config_changed", "config_words",
    "AXI4Signature", "axi4_layouts", "AXIResp", "AXIBurst",
]

#: Width of one lane of the vector network, of the scalar network and of a
#: configuration word.
WORD_BITS = 32
#: The three networks every switch and unit port belongs to (``vector_in``, ``scalar_in``,
#: ``control_in``, ...), in the order the switches, the array and the tools list them.
NETWORKS = ("vector", "scalar", "control")


def check_lanes(lanes):
    """Raise unless ``lanes`` is a positive power of two (a vector beat's lane count)."""
    if not isinstance(lanes, int) or isinstance(lanes, bool):
        raise TypeError(f"Lane count must be an integer, not {lanes!r}")
    if lanes < 1 or lanes & (lanes - 1):
        raise ValueError(f"Lane count must be a positive power of two, not {lanes}")


def check_int(name, value, low, high):
    """Raise unless ``value`` is an integer from ``low`` to ``high`` (``name`` says which
    parameter)."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{name} must be an integer, not {value!r}")
    if not low <= value <= high:
        raise ValueError(f"{name} must be between {low} and {high}, not {value}")


def vector_layout(lanes):
    """Payload of one vector-network beat: ``lanes`` words of 32 bits, lane 0 in the LSBs."""
    check_lanes(lanes)
    return data.ArrayLayout(unsigned(WORD_BITS), lanes)


def vector_stream(lanes):
    """Stream signature of the vector network (producer's view)."""
    return stream.Signature(vector_layout(lanes))


def scalar_stream():
    """Stream signature of the scalar network (producer's view)."""
    return stream.Signature(unsigned(WORD_BITS))


class ControlToken(enum.IntEnum, shape=1):
    """Meaning of the 1-bit control-network payload (the payload's shape).

    ``DONE`` (1) marks the end of a unit's work (its counter chain wrapped);
    ``STEP`` (0) is a plain token (a buffer filled or drained, a credit returned).
    """
    STEP = 0
    DONE = 1


def control_stream():
    """Stream signature of the control network (producer's view): 1-bit
    :class:`ControlToken` tokens."""
    return stream.Signature(ControlToken)


# --------------------------------------------------------------------------------------
# Configuration
# --------------------------------------------------------------------------------------

#: Width of the word index on a configuration port: a unit has at most 256 words.
CONFIG_INDEX_BITS = 8


def config_words(layout):
    """Number of 32-bit configuration words that hold ``layout`` (rounded up)."""
    size = data.Layout.cast(layout).size
    return max(1, -(-size // WORD_BITS))


class ConfigPort(wiring.Signature):
    """Configuration port of a unit (the configuration network's view: it drives it).

    Members
    -------
    write : Out(1)
        Write ``data`` into configuration word ``index`` on this cycle. Writes never
        stall: the unit accepts one word per cycle.
    index : Out(8)
        Configuration word index (word 0 holds bits 0..31 of the unit's layout).
    data : Out(32)
        Word to write.
    clear : Out(1)
        Set every configuration word to zero on this cycle (a record with the clear
        flag, ``docs/bitstream.md``); never in the same cycle as ``write``. Units react
        to it as to a write (:func:`config_changed`).
    read_data : In(32)
        Word ``index`` of the configuration currently held, one cycle after
        ``index`` is presented (a registered read, for readback).
    """
    def __init__(self):
        super().__init__({
            "write": Out(1),
            "index": Out(CONFIG_INDEX_BITS),
            "data": Out(WORD_BITS),
            "clear": Out(1),
            "read_data": In(WORD_BITS),
        })


class ConfigRegister(wiring.Component):
    """Configuration storage of one unit, loaded and read back through a :class:`ConfigPort`.

    Parameters
    ----------
    layout : data.Layout
        The unit's configuration layout. It is stored in ``config_words(layout)``
        32-bit words; bits past ``layout.size`` in the last word read back as zero.

    Attributes
    ----------
    port : In(ConfigPort)
        Driven by the configuration network.
    value : Out(layout)
        The configuration currently held (all zeroes after reset).
    """
    def __init__(self, layout):
        layout = data.Layout.cast(layout)
        words = config_words(layout)
        if words > 2 ** CONFIG_INDEX_BITS:
            raise ValueError(f"Configuration layout of {layout.size} bits needs {words} "
                             f"words, more than the {2 ** CONFIG_INDEX_BITS} a port addresses")
        self._layout = layout
        self._words = words
        super().__init__({
            "port": In(ConfigPort()),
            "value": Out(layout),
        })

    @property
    def words(self):
        return self._words

    def elaborate(self, platform):
        m = Module()
        storage = Signal(self._words * WORD_BITS)
        m.d.comb += self.value.eq(storage[:self._layout.size])
        # the words are written one at a time and cleared together: ``clear`` resets
        # them (in an FPGA the flip-flops' synchronous reset, not a multiplexer a bit)
        writes = Module()
        word_sel = Signal(WORD_BITS)
        with m.Switch(self.port.index):
            for index in range(self._words):
                with m.Case(index):
                    used = min(WORD_BITS, self._layout.size - index * WORD_BITS)
                    m.d.comb += word_sel.eq(storage.word_select(index, WORD_BITS)[:used])
        for index in range(self._words):
            with writes.If(self.port.write & (self.port.index == index)):
                writes.d.sync += storage.word_select(index, WORD_BITS).eq(self.port.data)
        m.submodules.words = ResetInserter(self.port.clear)(writes)
        m.d.sync += self.port.read_data.eq(word_sel)
        return m


def config_changed(port):
    """``write | clear`` of a :class:`ConfigPort` (its unit's side): the configuration
    held changes on this edge."""
    return port.write | port.clear


# --------------------------------------------------------------------------------------
# AXI4
# --------------------------------------------------------------------------------------

class AXIResp(enum.IntEnum, shape=2):
    """AXI4 ``BRESP``/``RRESP`` codes."""
    OKAY = 0b00
    EXOKAY = 0b01
    SLVERR = 0b10
    DECERR = 0b11


class AXIBurst(enum.IntEnum, shape=2):
    """AXI4 ``AxBURST`` codes."""
    FIXED = 0b00
    INCR = 0b01
    WRAP = 0b10


def axi4_layouts(addr_width, data_width, id_width):
    """The five AXI4 channel payload layouts, as a dict ``{"aw", "w", "b", "ar", "r"}``.

    Only the fields a memory-mapped data mover needs are carried (no cache, prot,
    qos, region or user signals: they are constant in this design).
    """
    address = data.StructLayout({
        "id": unsigned(id_width),
        "addr": unsigned(addr_width),
        "len": unsigned(8),     # beats - 1
        "size": unsigned(3),    # log2(bytes per beat)
        "burst": unsigned(2),
    })
    return {
        "aw": address,
        "w": data.StructLayout({
            "data": unsigned(data_width),
            "strb": unsigned(data_width // 8),
            "last": unsigned(1),
        }),
        "b": data.StructLayout({
            "id": unsigned(id_width),
            "resp": unsigned(2),
        }),
        "ar": address,
        "r": data.StructLayout({
            "id": unsigned(id_width),
            "data": unsigned(data_width),
            "resp": unsigned(2),
            "last": unsigned(1),
        }),
    }


class AXI4Signature(wiring.Signature):
    """AXI4 memory-mapped interface, manager's (master's) view.

    Parameters
    ----------
    addr_width : int
        Byte-address width.
    data_width : int
        Data bus width in bits (a power of two, at least 8); the AGCU uses the
        vector-link width, ``lanes * 32``.
    id_width : int
        Transaction ID width (several outstanding transactions per ID are allowed;
        responses with the same ID return in order).
    """
    def __init__(self, *, addr_width, data_width, id_width=4):
        for name, value in (("Address width", addr_width), ("Data width", data_width),
                            ("ID width", id_width)):
            if not isinstance(value, int) or isinstance(value, bool):
                raise TypeError(f"{name} must be an integer, not {value!r}")
        if not 1 <= addr_width <= 64:
            raise ValueError(f"Address width must be between 1 and 64, not {addr_width}")
        if data_width < 8 or data_width & (data_width - 1):
            raise ValueError(f"Data width must be a power of two of at least 8, "
                             f"not {data_width}")
        if not 1 <= id_width <= 16:
            raise ValueError(f"ID width must be between 1 and 16, not {id_width}")
        self.addr_width = addr_width
        self.data_width = data_width
        self.id_width = id_width
        layouts = axi4_layouts(addr_width, data_width, id_width)
        super().__init__({
            "aw": Out(stream.Signature(layouts["aw"])),
            "w": Out(stream.Signature(layouts["w"])),
            "b": In(stream.Signature(layouts["b"])),
            "ar": Out(stream.Signature(layouts["ar"])),
            "r": In(stream.Signature(layouts["r"])),
        })

    def __eq__(self, other):
        return (type(other) is AXI4Signature and
                (self.addr_width, self.data_width, self.id_width) ==
                (other.addr_width, other.data_width, other.id_width))

    def __repr__(self):
        return (f"AXI4Signature(addr_width={self.addr_width}, "
                f"data_width={self.data_width}, id_width={self.id_width})")
