"""The register map of the IP top, read from its SystemRDL source, and its gateware.

``hdl/rdu_ip.rdl`` is the one source of the map. :func:`register_map` compiles it with
``systemrdl-compiler`` into :class:`RegisterMap` (registers, fields, their semantics and
the enumerations of encoded fields); :class:`RegisterFile` is the register file built
from it and :class:`AXI4LiteRegisters` puts it behind an AXI4-Lite subordinate port.
The C header and the register documentation are generated from the same compiled
model by PeakRDL (:mod:`rdu.apps.ip`).

Field semantics (anything else in the SystemRDL source is refused with a
``ValueError`` naming the field):

========================================  ===========  ====================================
SystemRDL                                 ``kind``     gateware
========================================  ===========  ====================================
``sw=r hw=na``                            ``const``    the reset value
``sw=r hw=w``                             ``status``   an input, read live
``sw=rw hw=r``                            ``control``  a register, an output
``sw=rw hw=na``                           ``scratch``  a register only software sees
``sw=w hw=r singlepulse``                 ``pulse``    an output high for one cycle on a
                                                       write of 1; reads 0
``sw=rw hw=r woclr hwset``                ``sticky``   a register set by the input
                                                       ``<reg>_<field>_set``, cleared by
                                                       writing 1 (or by ``clear_sticky``)
========================================  ===========  ====================================

A write to a read-only field changes nothing; a read of an address no register occupies
returns 0. Both are answered ``OKAY``.
"""

import enum as py_enum
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from amaranth import Cat, Const, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .interfaces import WORD_BITS, AXIResp

__all__ = ["RDL_PATH", "Field", "Register", "RegisterMap", "register_map", "RegisterFile",
           "axi4lite_members", "AXI4LiteRegisters"]

#: The SystemRDL source of the IP top's register map.
RDL_PATH = Path(__file__).resolve().parent / "rdu_ip.rdl"
#: Top address map in :data:`RDL_PATH`.
RDL_TOP = "rdu_ip"

FIELD_KINDS = ("const", "status", "control", "scratch", "pulse", "sticky")


@dataclass(frozen=True)
class Field:
    """One field of a register: ``lsb``, ``width``, ``kind`` (:data:`FIELD_KINDS`),
    ``reset`` (the reset value of a stored or constant field), ``encode`` (an
    :class:`enum.IntEnum` of its values, or ``None``) and ``desc``."""
    name: str
    lsb: int
    width: int
    kind: str
    reset: int
    encode: object
    desc: str

    @property
    def mask(self):
        return ((1 << self.width) - 1) << self.lsb


@dataclass(frozen=True)
class Register:
    """One 32-bit register at byte ``offset``."""
    name: str
    offset: int
    fields: tuple
    desc: str

    def field(self, name):
        for field in self.fields:
            if field.name == name:
                return field
        raise KeyError(f"register {self.name} has no field {name!r}")

    @property
    def reset(self):
        """The value a read returns after reset, ``status`` fields read as 0."""
        return sum(f.reset << f.lsb for f in self.fields
                   if f.kind in ("const", "control", "scratch", "sticky"))


@dataclass(frozen=True)
class RegisterMap:
    """The compiled register map: its registers in address order."""
    name: str
    registers: tuple

    def __getitem__(self, name):
        for register in self.registers:
            if register.name == name:
                return register
        raise KeyError(f"no register {name!r} in the {self.name} map")

    @property
    def size(self):
        """Bytes the map spans (the last register's end)."""
        return max(r.offset for r in self.registers) + WORD_BITS // 8

    def enum(self, register, field):
        """The :class:`enum.IntEnum` of an encoded field."""
        return self[register].field(field).encode


def _kind(node):
    from systemrdl.rdltypes import AccessType, OnWriteType
    sw, hw = node.get_property("sw"), node.get_property("hw")
    singlepulse = node.get_property("singlepulse")
    onwrite = node.get_property("onwrite")
    hwset = node.get_property("hwset")
    if sw == AccessType.r and hw == AccessType.na:
        kind = "const"
    elif sw == AccessType.r and hw == AccessType.w:
        kind = "status"
    elif sw == AccessType.rw and hw == AccessType.r and onwrite == OnWriteType.woclr and hwset:
        return "sticky"
    elif sw == AccessType.w and hw == AccessType.r and singlepulse:
        return "pulse"
    elif sw == AccessType.rw and hw == AccessType.r:
        kind = "control"
    elif sw == AccessType.rw and hw == AccessType.na:
        kind = "scratch"
    else:
        kind = None
    if kind is None or singlepulse or onwrite is not None or hwset:
        raise ValueError(f"Field {node.get_path()} has semantics the register file does "
                         f"not implement (sw={sw.name}, hw={hw.name}, singlepulse="
                         f"{singlepulse}, onwrite={onwrite}, hwset={hwset})")
    return kind


@lru_cache(maxsize=None)
def _compile(path, top):
    try:
        from systemrdl import RDLCompileError, RDLCompiler
    except ImportError:
        raise ImportError("the IP top's register map needs systemrdl-compiler: install the "
                          "'ip' extra (pip install -e '.[ip]')") from None
    compiler = RDLCompiler()
    try:
        compiler.compile_file(str(path))
        return compiler.elaborate(top_def_name=top)
    except RDLCompileError:
        raise ValueError(f"SystemRDL source {path} does not compile (see the messages "
                         f"above)") from None


def rdl_root(path=RDL_PATH, top=RDL_TOP):
    """The elaborated ``systemrdl`` root node of the map (for the PeakRDL exporters)."""
    return _compile(str(path), top)


@lru_cache(maxsize=None)
def register_map(path=RDL_PATH, top=RDL_TOP):
    """The :class:`RegisterMap` compiled from the SystemRDL source at ``path``."""
    root = rdl_root(path, top)
    registers = []
    for node in root.top.registers():
        if node.is_array or node.get_property("regwidth") != WORD_BITS:
            raise ValueError(f"Register {node.get_path()} must be a single 32-bit register")
        if node.absolute_address % 4:
            raise ValueError(f"Register {node.get_path()} is not word aligned")
        fields = []
        for field in node.fields():
            encode = field.get_property("encode")
            if encode is not None:
                encode = py_enum.IntEnum(encode.type_name, {
                    member.name: member.value for member in encode})
            fields.append(Field(field.inst_name, field.lsb, field.width, _kind(field),
                                field.get_property("reset") or 0, encode,
                                field.get_property("desc") or ""))
        registers.append(Register(node.inst_name, node.absolute_address, tuple(fields),
                                  node.get_property("name") or ""))
    registers.sort(key=lambda r: r.offset)
    return RegisterMap(root.top.inst_name, tuple(registers))


def _port(register, field):
    return f"{register.name}_{field.name}".lower()


class RegisterFile(wiring.Component):
    """The register file of a :class:`RegisterMap`, on a simple word bus.

    Parameters
    ----------
    regmap : RegisterMap

    Attributes
    ----------
    addr : In(addr_bits)
        Word index (byte address / 4) of the access.
    write : In(1)
        Write ``wdata`` under ``wstrb`` (one bit per byte) into register ``addr`` at the
        end of this cycle.
    wdata : In(32)
    wstrb : In(4)
    rdata : Out(32)
        The value of register ``addr`` (combinational; 0 where no register is).
    clear_sticky : In(1)
        Clear every ``sticky`` field.
    <reg>_<field> :
        ``In(width)`` for a ``status`` field, ``Out(width)`` for ``control``, ``pulse``
        and ``sticky`` fields; ``<reg>_<field>_set : In(1)`` sets a ``sticky`` field.
    """

    def __init__(self, regmap):
        if not isinstance(regmap, RegisterMap):
            raise TypeError(f"Register map must be a RegisterMap, not {regmap!r}")
        self.regmap = regmap
        self.addr_bits = max(1, (regmap.size // 4 - 1).bit_length())
        members = {
            "addr": In(self.addr_bits), "write": In(1), "wdata": In(WORD_BITS),
            "wstrb": In(WORD_BITS // 8), "rdata": Out(WORD_BITS), "clear_sticky": In(1),
        }
        for register in regmap.registers:
            for field in register.fields:
                name = _port(register, field)
                if field.kind == "status":
                    members[name] = In(field.width)
                elif field.kind in ("control", "pulse", "sticky"):
                    members[name] = Out(field.width, init=field.reset
                                        if field.kind != "pulse" else 0)
                if field.kind == "sticky":
                    members[f"{name}_set"] = In(1)
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        byte_mask = Signal(WORD_BITS)
        m.d.comb += byte_mask.eq(Cat(*(bit.replicate(8) for bit in self.wstrb)))
        for register in self.regmap.registers:
            word = register.offset // 4
            selected = Signal(name=f"{register.name.lower()}_write")
            m.d.comb += selected.eq(self.write & (self.addr == word))
            parts = []
            for field in register.fields:
                name = _port(register, field)
                bits = slice(field.lsb, field.lsb + field.width)
                wdata, wmask = self.wdata[bits], byte_mask[bits]
                if field.kind == "const":
                    value = Const(field.reset, field.width)
                elif field.kind == "status":
                    value = getattr(self, name)
                elif field.kind == "pulse":
                    value = Const(0, field.width)
                    pulse = getattr(self, name)
                    m.d.sync += pulse.eq(0)
                    with m.If(selected):
                        m.d.sync += pulse.eq(wdata & wmask)
                else:
                    if field.kind == "scratch":
                        value = Signal(field.width, init=field.reset, name=name)
                    else:
                        value = getattr(self, name)
                    if field.kind == "sticky":
                        cleared = value & ~(Cat(selected.replicate(field.width)) & wdata & wmask)
                        with m.If(self.clear_sticky):
                            m.d.sync += value.eq(0)
                        with m.Else():
                            m.d.sync += value.eq(cleared | getattr(self, f"{name}_set"))
                    else:
                        with m.If(selected):
                            m.d.sync += value.eq((value & ~wmask) | (wdata & wmask))
                parts.append((field.lsb, field.width, value))
            read = Signal(WORD_BITS, name=f"{register.name.lower()}_value")
            m.d.comb += read.eq(sum(value << lsb for lsb, _, value in parts))
            with m.If(self.addr == word):
                m.d.comb += self.rdata.eq(read)
        return m


def axi4lite_members(addr_width, data_width=WORD_BITS):
    """``{name: (direction, width)}`` of an AXI4-Lite port, the subordinate's view
    (``"in"``: driven by the manager), in the AMBA names without prefix
    (``awaddr``, ``awprot``, ``awvalid``, ...)."""
    strb = data_width // 8
    return {
        "awaddr": ("in", addr_width), "awprot": ("in", 3), "awvalid": ("in", 1),
        "awready": ("out", 1),
        "wdata": ("in", data_width), "wstrb": ("in", strb), "wvalid": ("in", 1),
        "wready": ("out", 1),
        "bresp": ("out", 2), "bvalid": ("out", 1), "bready": ("in", 1),
        "araddr": ("in", addr_width), "arprot": ("in", 3), "arvalid": ("in", 1),
        "arready": ("out", 1),
        "rdata": ("out", data_width), "rresp": ("out", 2), "rvalid": ("out", 1),
        "rready": ("in", 1),
    }


class AXI4LiteRegisters(wiring.Component):
    """A :class:`RegisterFile` behind an AXI4-Lite subordinate port.

    Writes: the address and the data channel are taken independently (each held until
    the write is made); the write happens once both are held and no response is
    waiting, and its response (always ``OKAY``) follows on the next cycle. Reads: one at
    a time; ``rdata`` is registered at the ``ar`` handshake and answered ``OKAY`` (0
    where no register is). The address is a byte address; bits below the word are
    ignored, and so is ``AxPROT``.

    Parameters
    ----------
    regmap : RegisterMap
    addr_width : int
        Width of ``awaddr``/``araddr`` (the port's window is ``2**addr_width`` bytes;
        addresses above the map read 0).

    Attributes
    ----------
    awaddr, awprot, awvalid, awready, wdata, wstrb, wvalid, wready, bresp, bvalid,
    bready, araddr, arprot, arvalid, arready, rdata, rresp, rvalid, rready
        The AXI4-Lite port (:func:`axi4lite_members`).
    regs : RegisterFile
        The register file (its hardware fields are connected by the parent).
    """

    def __init__(self, regmap, *, addr_width=12):
        if not isinstance(addr_width, int) or isinstance(addr_width, bool):
            raise TypeError(f"AXI4-Lite address width must be an integer, not {addr_width!r}")
        if not isinstance(regmap, RegisterMap):
            raise TypeError(f"Register map must be a RegisterMap, not {regmap!r}")
        if not regmap.size <= 1 << addr_width <= 1 << 32:
            raise ValueError(f"AXI4-Lite address width must be between "
                             f"{(regmap.size - 1).bit_length()} (the map's "
                             f"{regmap.size} bytes) and 32, not {addr_width}")
        self.addr_width = addr_width
        self.regs = RegisterFile(regmap)
        super().__init__({name: (In if direction == "in" else Out)(width)
                          for name, (direction, width) in axi4lite_members(addr_width).items()})

    def elaborate(self, platform):
        m = Module()
        m.submodules.regs = regs = self.regs
        aw_held, w_held = Signal(), Signal()
        aw_addr = Signal(self.addr_width)
        w_data, w_strb = Signal(WORD_BITS), Signal(WORD_BITS // 8)
        m.d.comb += [self.awready.eq(~aw_held), self.wready.eq(~w_held),
                     self.bresp.eq(AXIResp.OKAY), self.rresp.eq(AXIResp.OKAY)]
        with m.If(self.awvalid & self.awready):
            m.d.sync += [aw_held.eq(1), aw_addr.eq(self.awaddr)]
        with m.If(self.wvalid & self.wready):
            m.d.sync += [w_held.eq(1), w_data.eq(self.wdata), w_strb.eq(self.wstrb)]
        with m.If(self.bvalid & self.bready):
            m.d.sync += self.bvalid.eq(0)
        perform = Signal()
        m.d.comb += perform.eq(aw_held & w_held & ~self.bvalid)
        with m.If(perform):
            m.d.sync += [aw_held.eq(0), w_held.eq(0), self.bvalid.eq(1)]
        in_map = Signal()
        word = Signal(self.addr_width)
        # one bus for the register file: the write when one is made, else the read address
        m.d.comb += word.eq(Cat(self.araddr[2:]))
        with m.If(perform):
            m.d.comb += word.eq(aw_addr[2:])
        m.d.comb += [in_map.eq(word < (1 << regs.addr_bits)),
                     regs.addr.eq(word), regs.write.eq(perform & in_map),
                     regs.wdata.eq(w_data), regs.wstrb.eq(w_strb)]
        # a read is taken only on a cycle without a write (the bus serves one)
        m.d.comb += self.arready.eq(~self.rvalid & ~perform)
        with m.If(self.rvalid & self.rready):
            m.d.sync += self.rvalid.eq(0)
        with m.If(self.arvalid & self.arready):
            m.d.sync += [self.rvalid.eq(1),
                         self.rdata.eq(in_map.replicate(WORD_BITS) & regs.rdata)]
        return m
