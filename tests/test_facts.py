"""One copy of each hardware fact: defined once in ``hdl/``, imported everywhere else.

Scans the Python sources outside ``hdl/`` for re-declarations of known facts (direction
tuples, the checkerboard rule, FIFO depths, control-token and unit-kind codes, the
bitstream magic, the affine loop, the systolic accumulation) and checks that what the
software uses is the hardware's own definition (``docs/architecture.md``, "Where the
facts live").
"""

import inspect
import re
from pathlib import Path

import pytest
from amaranth.hdl import Shape
from amaranth.lib import data
from amaranth.lib import enum as amaranth_enum

ROOT = Path(__file__).resolve().parent.parent
#: Source trees that must import facts rather than declare them.
CONSUMERS = ("software", "tb", "benchmarks", "tests", "sim_models")
THIS = Path(__file__).resolve()


def _sources():
    for tree in CONSUMERS:
        for path in sorted((ROOT / tree).rglob("*.py")):
            if path.resolve() != THIS and ".venv" not in path.parts:
                yield path


def _code_lines(path):
    """``(number, line)`` of the source lines that are neither comments nor reST prose
    (lines with double backquotes)."""
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.lstrip().startswith("#") and "``" not in line:
            yield number, line


#: (what, pattern, files allowed to match, relative to the repository root)
REDECLARATIONS = [
    ("a direction tuple (use hdl.switch.Direction / Port / VectorOutput)",
     re.compile(r"\b(NORTH|EAST|SOUTH|WEST|LOCAL\d?)\b[\w\s,]*=\s*range\("), ()),
    ("direction names (use hdl.switch.DIRECTIONS / Direction.port)",
     re.compile(r"=\s*\(\s*\"north\",\s*\"east\",\s*\"south\",\s*\"west\""), ()),
    ("the checkerboard rule (use hdl.array.is_compute_position)",
     re.compile(r"\(\s*\w+\s*\+\s*\w+\s*\)\s*%\s*2\s*==\s*0"), ()),
    ("a FIFO depth or credit count (import it from hdl.switch / hdl.pmu / hdl.pcu)",
     re.compile(r"^\s*\w*(DEPTH|CREDITS)\w*\s*=\s*\d"), ()),
    ("control-token codes (use hdl.interfaces.ControlToken)",
     re.compile(r"\b(STEP|DONE)\b[\w\s,]*=\s*\d"), ()),
    ("the bitstream magic (use hdl.config_net.MAGIC)",
     re.compile(r"\bMAGIC\s*=\s*0x"), ()),
    ("the burst boundary (use hdl.agcu_engines.BURST_BOUNDARY)",
     re.compile(r"\bBURST_BOUNDARY\s*=\s*\d"), ()),
    ("PCU codes (use hdl.pcu_config.Mode / Reduce / Tail / Source)",
     re.compile(r"\b(MODE_SIMD|REDUCE_NONE|TAIL_NONE)\b[\w\s,]*=\s*\d"), ()),
    ("the affine loop (use rdu.affine)",
     re.compile(r"\bi2\s*\*\s*\w*\[?\s*[\"']?strides?\b"), ("software/rdu/affine.py",)),
    ("the network names (use hdl.interfaces.NETWORKS)",
     re.compile(r"=\s*\(\s*\"vector\",\s*\"scalar\",\s*\"control\"\s*\)"), ()),
    ("a systolic accumulation (use rdu.models.pcu_reference.systolic_accumulate)",
     re.compile(r"fpmodel\.add\(\s*acc\b"), ("software/rdu/pcu_reference.py",)),
]

#: Code enums defined in hdl; no other module may define a class of that name.
HDL_ENUMS = {
    "hdl.switch": ["Direction", "Port", "Source", "VectorOutput"],
    "hdl.interfaces": ["ControlToken", "AXIResp", "AXIBurst"],
    "hdl.config_net": ["UnitKind", "ConfigStatus", "LoaderState"],
    "hdl.agcu": ["AGCUOp", "AGCUError"],
    "hdl.pcu_config": ["Mode", "Source", "Reduce", "Tail", "PCUError"],
    "hdl.pmu": ["PMUError"],
    "hdl.fp": ["Op"],
    "hdl.special_function": ["SpecialFunction"],
}


@pytest.mark.parametrize("what,pattern,allowed", REDECLARATIONS,
                         ids=[entry[0].split(" (")[0] for entry in REDECLARATIONS])
def test_no_redeclared_fact(what, pattern, allowed):
    found = []
    for path in _sources():
        relative = path.relative_to(ROOT).as_posix()
        if relative in allowed:
            continue
        for number, line in _code_lines(path):
            if pattern.search(line):
                found.append(f"{relative}:{number}: {line.strip()}")
    assert not found, f"{what} re-declared:\n" + "\n".join(found)


#: Classes elsewhere that share a name with an hdl enum but are another thing.
UNRELATED_CLASSES = {("software/rdu/ir.py", "Port")}      # a node's port in the IR graph


def test_no_redeclared_enum():
    names = {name for names in HDL_ENUMS.values() for name in names}
    pattern = re.compile(r"^\s*class\s+(\w+)\b")
    found = []
    for path in _sources():
        for number, line in _code_lines(path):
            match = pattern.match(line)
            if match and match.group(1) in names and \
                    (path.relative_to(ROOT).as_posix(), match.group(1)) not in UNRELATED_CLASSES:
                found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not found, "hardware code enums re-declared:\n" + "\n".join(found)


@pytest.mark.parametrize("module", sorted(HDL_ENUMS))
def test_codes_are_amaranth_enums(module):
    imported = __import__(module, fromlist=["_"])
    for name in HDL_ENUMS[module]:
        shape = getattr(imported, name)
        assert isinstance(shape, amaranth_enum.EnumType), f"{module}.{name}"
        # IntEnum: codes read from a simulator (ints) compare equal to the members
        assert issubclass(shape, int), f"{module}.{name} is not an IntEnum"
        Shape.cast(shape)


def test_software_uses_the_hardware_codes():
    from rdu import bitstream
    from rdu.models import pcu_reference

    from hdl import config_net, pcu_config
    assert bitstream.UnitKind is config_net.UnitKind
    assert bitstream.ConfigStatus is config_net.ConfigStatus
    assert (bitstream.MAGIC, bitstream.VERSION, bitstream.HEADER_WORDS,
            bitstream.MAX_RECORD_WORDS) == (config_net.MAGIC, config_net.VERSION,
                                            config_net.HEADER_WORDS,
                                            config_net.MAX_RECORD_WORDS)
    assert pcu_reference.MODE_SIMD is pcu_config.Mode.SIMD
    assert pcu_reference.MODE_SYSTOLIC is pcu_config.Mode.SYSTOLIC
    assert set(pcu_reference.SOURCES.values()) == set(pcu_config.Source)


def _field_width(layout, *path):
    shape = data.Layout.cast(layout)
    for name in path:
        shape = shape[name].shape if isinstance(name, str) else shape.elem_shape
        if isinstance(shape, data.Layout):
            continue
    return Shape.cast(shape).width


def test_code_fields_have_the_enum_widths():
    from hdl.agcu import AGCUOp, agcu_command_layout
    from hdl.fp import Op
    from hdl.pcu_config import Mode, Reduce, Source, Tail, pcu_config_layout, stage_layout
    from hdl.switch import SELECT_BITS, Port, VectorOutput, switch_config_layout
    from hdl.switch import Source as RouteSource
    assert _field_width(agcu_command_layout(), "op") == Shape.cast(AGCUOp).width
    layout = pcu_config_layout(4, 2)
    assert _field_width(layout, "mode") == Shape.cast(Mode).width
    assert _field_width(layout, "reduce") == Shape.cast(Reduce).width
    assert _field_width(layout, "tail") == Shape.cast(Tail).width
    assert _field_width(stage_layout(), "op") == Shape.cast(Op).width
    assert _field_width(stage_layout(), "src_a") == Shape.cast(Source).width
    assert SELECT_BITS == Shape.cast(RouteSource).width
    switch = data.Layout.cast(switch_config_layout())
    assert switch["vector"].shape.length == len(VectorOutput)
    assert switch["scalar"].shape.length == len(Port)
    assert switch["vector_merge"].shape.elem_shape.length == len(Port)
    assert [RouteSource(port + 1) for port in Port] == [port.source for port in Port]


def _default(cls, name):
    return inspect.signature(cls).parameters[name].default


def test_model_queues_have_the_hardware_depths():
    from rdu.models import array as model_array
    from rdu.models import pmu as model_pmu
    from rdu.models.pcu import PCUModel

    from hdl import pcu, pmu, switch
    from hdl.array import TileArray
    from hdl.system import RDUSystem
    # the hardware's defaults are its named constants
    assert _default(switch.Switch, "fifo_depth") == switch.FIFO_DEPTH
    assert _default(TileArray, "fifo_depth") == switch.FIFO_DEPTH
    assert _default(RDUSystem, "fifo_depth") == switch.FIFO_DEPTH
    assert _default(pcu.PCU, "fifo_depth") == pcu.FIFO_DEPTH
    assert _default(pmu.PMU, "fifo_depth") == pmu.FIFO_DEPTH
    # the units build their FIFOs with them
    unit = pmu.PMU(lanes=4, capacity_bytes=4096)
    module = unit.elaborate(None)
    assert module.submodules.scalar_out_fifo.depth == pmu.SCALAR_OUT_FIFO_DEPTH
    assert module.submodules.vector_out_fifo.depth == pmu.OUTPUT_FIFO_DEPTH
    assert module.submodules.vector_in_fifo.depth == pmu.FIFO_DEPTH
    module = pcu.PCU(lanes=4, stages=1).elaborate(None)
    assert module.submodules.vector_in0_fifo.depth == pcu.FIFO_DEPTH
    # and the model's queues are those depths
    assert model_array.SWITCH_FIFO_DEPTH == switch.FIFO_DEPTH
    assert model_array.PMU_INPUT_DEPTH == pmu.FIFO_DEPTH
    assert model_array.PMU_SCALAR_OUT_DEPTH == pmu.SCALAR_OUT_FIFO_DEPTH
    assert model_array.OUTPUT_FIFO_DEPTH == pmu.OUTPUT_FIFO_DEPTH
    assert model_array.PCU_FIFO_DEPTH == pcu.FIFO_DEPTH
    assert model_pmu.GATE_CREDITS == pmu.READ_GATE_CREDITS
    array = model_array.FunctionalArray(2, 2, 4, capacity_bytes=1024)
    assert array.fifo_depth == switch.FIFO_DEPTH
    array.loaded = True
    switch_inputs, _, _, units, _ = array.build_run(None, [])
    for (row, col, _), queues in switch_inputs.items():
        assert [queue.capacity for queue in queues[:4]] == [switch.FIFO_DEPTH] * 4
        if array.unit_kind(row, col) == model_array.UnitKind.PCU:
            assert queues[model_array.LOCAL].capacity == switch.FIFO_DEPTH + pcu.FIFO_DEPTH
    for unit in units:
        if isinstance(unit, PCUModel):
            assert unit.in0.capacity == unit.sin.capacity == pcu.FIFO_DEPTH
        else:
            assert unit.vin.capacity == unit.sin.capacity == pmu.FIFO_DEPTH


def test_one_checkerboard():
    from rdu.machine import Machine  # noqa: F401  (the system description imports cleanly)
    from rdu.mapper import ArrayGeometry
    from rdu.models.array import FunctionalArray

    from hdl.array import TileArray, is_compute_position
    from hdl.config_net import UnitKind
    from hdl.pcu import PCU
    rows, cols = 3, 4
    hardware = TileArray(rows, cols, 4, compute_unit=PCU, capacity_bytes=1024)
    model = FunctionalArray(rows, cols, 4, capacity_bytes=1024)
    geometry = ArrayGeometry(rows, cols, 4)
    for row in range(rows):
        for col in range(cols):
            kind = UnitKind.PCU if is_compute_position(row, col) else UnitKind.PMU
            assert hardware.unit_kind(row, col) == kind
            assert model.unit_kind(row, col) == kind
            assert geometry.unit_at(row, col) == kind.name.lower()


def test_one_direction_map():
    from rdu import mapper
    from rdu.models import array as model_array
    from rdu.models import switch as model_switch

    from hdl import array
    from hdl.switch import DIRECTIONS, NARROW_OUTPUTS, VECTOR_OUTPUTS, Direction
    assert (array.NORTH, array.EAST, array.SOUTH, array.WEST) == tuple(Direction)
    assert tuple(mapper.DIRECTIONS) == DIRECTIONS
    assert mapper.MERGE_ORDER == NARROW_OUTPUTS
    assert model_switch.DIRECTION_NAMES == NARROW_OUTPUTS
    assert VECTOR_OUTPUTS[:4] == NARROW_OUTPUTS[:4] == DIRECTIONS
    for direction in Direction:
        assert mapper.OPPOSITE[direction.port] == direction.opposite.port
        assert model_array.OPPOSITE[direction] == direction.opposite
        d_row, d_col = direction.offset
        assert direction.opposite.offset == (-d_row, -d_col)


def test_control_tokens():
    from rdu.models import shared

    from hdl.interfaces import ControlToken, control_stream
    assert (shared.STEP, shared.DONE) == (ControlToken.STEP, ControlToken.DONE)
    assert Shape.cast(control_stream().members["payload"].shape).width == 1
