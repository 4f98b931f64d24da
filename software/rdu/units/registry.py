"""The unit registry: each :class:`hdl.config_net.UnitKind` -> every piece of that unit.

One :class:`UnitPieces` per unit kind holds the unit's RTL class, its configuration
layout, its encoder (IR data -> words, :mod:`rdu.units`), its decoder (words -> named
fields, what ``rdu inspect`` prints), its functional model class (:mod:`rdu.models`),
its bit-exact reference where it has one, its docs page and its tests. The functional
model (:class:`rdu.models.array.FunctionalArray`) and ``rdu inspect`` take the layouts
and decoders from here; ``docs/architecture.md`` lists the table (checked by
``tests/test_units.py``).

The compute unit a system is built with is a :class:`PCUVariant` of
:data:`PCU_VARIANTS` (``Machine.pcu``, ``rdu run --pcu``): an object holding its RTL
class and options, called like the class (``variant(lanes=8)``).

>>> UNITS[UnitKind.PCU].rtl.__name__
'PCU'
>>> UNITS[UnitKind.PMU].decode([0] * 4, lanes=8, stages=4)["buffers"]
0
"""

from dataclasses import dataclass, field, replace

from hdl import defaults
from hdl.agcu import AGCU, agcu_config_layout
from hdl.config_net import UnitKind
from hdl.pcu import FIFO_DEPTH, FPGA_PCU_OPTIONS, PCU, check_shared_units
from hdl.pcu_config import pcu_config_layout
from hdl.pmu import PMU, pmu_config_layout
from hdl.special_function import PROGRAMS, SpecialFunction
from hdl.switch import Switch, switch_config_layout

from .. import affine
from ..bitstream import read_bitstream
from ..models import pcu_reference
from ..models.agcu import AGCUModel
from ..models.pcu import PCUModel
from ..models.pmu import PMUModel
from ..models.switch import SwitchNetworkModel
from ..unitconfig import unpack_config
from . import agcu as agcu_encoder
from . import pcu as pcu_encoder
from . import pmu as pmu_encoder
from . import switch as switch_encoder

__all__ = ["UnitPieces", "UNITS", "unit_layouts", "fields_as_stored", "no_beats",
           "busiest_unit", "PCUVariant", "PCU_VARIANTS"]


def fields_as_stored(fields):
    """The decoder of a unit whose fields are all numbers (PMU, AGCU)."""
    return fields


def no_beats(fields):
    """The work of a unit that only routes (a switch): none of its own."""
    return 0


@dataclass(frozen=True)
class UnitPieces:
    """Every piece of one unit kind.

    Attributes
    ----------
    kind : UnitKind
        The record kind of the unit in a bitstream.
    rtl : type
        The unit's Amaranth component (``hdl/``).
    config_layout : callable
        ``hdl``'s layout function of its configuration words; it takes the parameters
        named in ``layout_params`` (of ``lanes`` and ``stages``).
    layout_params : tuple of str
    encoder : callable
        IR data -> configuration words (:mod:`rdu.units`).
    named_fields : callable
        Decoded fields -> the same fields with codes named (``rdu inspect``).
    model : type
        The functional model's class of the unit (:mod:`rdu.models`).
    reference : module or None
        The bit-exact Python reference of what the unit computes, where it has one.
    docs : str
        The unit's docs page (from the project root).
    tests : tuple of str
        Its pytest file and cocotb suite (from the project root).
    beats : callable
        Decoded fields -> the beats one run of the configuration moves through the
        unit (at best one a cycle: a lower bound of the run's cycles; the watchdog's
        estimate, :mod:`rdu.runtime.watchdog`).
    """
    kind: UnitKind
    rtl: type
    config_layout: object
    layout_params: tuple
    encoder: object
    named_fields: object
    model: type
    reference: object
    docs: str
    tests: tuple = field(default=())
    beats: object = no_beats

    def layout(self, lanes, stages):
        """The configuration layout of this unit in an array of ``lanes`` lanes and
        PCUs of ``stages`` SIMD stages."""
        given = {"lanes": lanes, "stages": stages}
        return self.config_layout(*(given[name] for name in self.layout_params))

    def decode(self, words, lanes, stages):
        """The fields of configuration ``words`` (nested dicts and lists of ints)."""
        return unpack_config(self.layout(lanes, stages), words)


#: UnitKind -> its pieces, in UnitKind order.
UNITS = {
    UnitKind.PCU: UnitPieces(
        UnitKind.PCU, PCU, pcu_config_layout, ("lanes", "stages"), pcu_encoder.encode,
        pcu_encoder.named_fields, PCUModel, pcu_reference, "docs/pcu.md",
        ("tests/test_pcu.py", "tb/suites/pcu.py"), pcu_encoder.beats),
    UnitKind.PMU: UnitPieces(
        UnitKind.PMU, PMU, pmu_config_layout, (), pmu_encoder.encode, fields_as_stored,
        PMUModel, affine, "docs/pmu.md", ("tests/test_pmu.py", "tb/suites/pmu.py"),
        pmu_encoder.beats),
    UnitKind.SWITCH: UnitPieces(
        UnitKind.SWITCH, Switch, switch_config_layout, (), switch_encoder.encode_all,
        switch_encoder.named_fields, SwitchNetworkModel, None, "docs/switch.md",
        ("tests/test_switch.py", "tb/suites/switch.py")),
    UnitKind.AGCU: UnitPieces(
        UnitKind.AGCU, AGCU, agcu_config_layout, (), agcu_encoder.encode, fields_as_stored,
        AGCUModel, affine, "docs/agcu.md", ("tests/test_agcu.py", "tb/suites/agcu.py"),
        agcu_encoder.beats),
}


def busiest_unit(words, stages):
    """``(beats, kind, row, col)`` of the unit that moves the most beats in one run of
    bitstream ``words`` (PCUs of ``stages`` stages): the run takes at least ``beats``
    cycles."""
    header, records = read_bitstream(words)
    lanes = header.geometry.lanes
    found = (0, None, 0, 0)
    for record in records:
        pieces = UNITS[record.kind]
        beats = pieces.beats(pieces.decode(record.words, lanes, stages))
        if beats > found[0]:
            found = (beats, record.kind, record.row, record.col)
    return found


def unit_layouts(lanes, stages):
    """``{UnitKind: configuration layout}`` of an array of ``lanes`` lanes and PCUs of
    ``stages`` SIMD stages."""
    return {kind: pieces.layout(lanes, stages) for kind, pieces in UNITS.items()}


@dataclass(frozen=True)
class PCUVariant:
    """A compute unit a system can be built with: the RTL class and its options.

    Called like the class it builds (``variant(lanes=8)``), so it is a ``compute_unit``
    of :class:`hdl.array.TileArray` and :class:`hdl.system.RDUSystem`.

    Attributes
    ----------
    name : str
        Its ``Machine.pcu`` / ``rdu run --pcu`` name.
    rtl : type
        The component class (:class:`hdl.pcu.PCU`).
    options : dict
        Keyword arguments of ``rtl`` beyond lanes, stages and FIFO depth.
    """
    name: str
    rtl: type
    options: dict = field(default_factory=dict)

    def __call__(self, lanes=defaults.LANES, stages=defaults.STAGES, fifo_depth=FIFO_DEPTH):
        return self.rtl(lanes, stages, fifo_depth, **self.options)

    def with_fp_latency(self, fp_latency):
        """This variant with the PCU's ``fp_latency`` (``"off"``: itself)."""
        if fp_latency in (None, 0, "off"):
            return self
        return replace(self, options={**self.options, "fp_latency": fp_latency})

    def check(self, lanes, stages):
        """Raise ``ValueError`` if this variant cannot be built with ``lanes`` lanes and
        ``stages`` stages (the shared units need ``stages >= lanes``)."""
        if self.options.get("shared_units"):
            check_shared_units(lanes, stages)
            if self.options.get("fp_latency", "off") != "off":
                raise ValueError("fp_latency needs the SIMD stages' own ALUs, not "
                                 "shared_units")

    @property
    def special_function_period(self):
        """Cycles per vector of its special functions: 1 when pipelined; the iterating
        unit (``special="iterative"``) takes its exp program's steps + 1."""
        if self.options.get("special") == "iterative":
            return len(PROGRAMS[SpecialFunction.EXP]) + 1
        return 1

    def __repr__(self):
        fp_latency = self.options.get("fp_latency", "off")
        extra = "" if fp_latency == "off" else f", fp_latency={fp_latency!r}"
        return f"PCUVariant({self.name!r}{extra})"


#: The compute units (``standard``: the simulated machines' PCU; ``fpga``: the FPGA
#: configuration's, :data:`hdl.pcu.FPGA_PCU_OPTIONS`: the same words, exp and the
#: reciprocal 13 and 8 cycles per vector).
PCU_VARIANTS = {variant.name: variant for variant in (
    PCUVariant("standard", PCU),
    PCUVariant("fpga", PCU, dict(FPGA_PCU_OPTIONS)),
)}
