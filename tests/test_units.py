"""The unit registry (rdu.units.registry): every UnitKind has its pieces, they are the
ones the hardware, the compiler, the functional model and ``rdu inspect`` use, and the
table "A unit's pieces" in docs/architecture.md is the registry's."""

from pathlib import Path

import pytest
from rdu.models.array import FunctionalArray
from rdu.units import agcu as agcu_encoder
from rdu.units.registry import PCU_VARIANTS, UNITS, fields_as_stored, unit_layouts

from hdl.array import TileArray
from hdl.config_net import UnitKind
from hdl.interfaces import config_words
from hdl.pcu import FPGA_PCU_OPTIONS, PCU
from hdl.pcu_config import pcu_config_layout

ROOT = Path(__file__).resolve().parents[1]
BEGIN = "<!-- unit pieces: the table of rdu.units.registry.UNITS (tests/test_units.py) -->"
END = "<!-- end of unit pieces -->"


def _name(thing):
    """``module.name`` of a class or function, ``module`` of a module."""
    qualified = getattr(thing, "__qualname__", None)
    return f"{thing.__module__}.{qualified}" if qualified else thing.__name__


def pieces_table():
    """The markdown table of the registry (docs/architecture.md holds it)."""
    lines = ["| unit | RTL | layout | encoder | decoder | functional model | reference | "
             "docs | tests |", "|---|---|---|---|---|---|---|---|---|"]
    for kind, pieces in UNITS.items():
        cells = [f"`{cell}`" for cell in (
            _name(pieces.rtl), _name(pieces.config_layout), _name(pieces.encoder),
            _name(pieces.named_fields), _name(pieces.model))]
        reference = f"`{_name(pieces.reference)}`" if pieces.reference else "none"
        tests = ", ".join(f"`{path}`" for path in pieces.tests)
        cells = [kind.name, *cells, reference, f"[`{pieces.docs}`]({Path(pieces.docs).name})",
                 tests]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def test_every_unit_kind_is_registered():
    assert list(UNITS) == list(UnitKind)
    for kind, pieces in UNITS.items():
        assert pieces.kind is kind
        assert pieces.rtl.__module__.startswith("hdl."), kind
        assert pieces.model.__module__.startswith("rdu.models."), kind


def test_the_pieces_exist():
    for pieces in UNITS.values():
        assert (ROOT / pieces.docs).is_file(), pieces.docs
        for path in pieces.tests:
            assert (ROOT / path).is_file(), path


def test_architecture_lists_the_registry():
    text = (ROOT / "docs" / "architecture.md").read_text()
    assert BEGIN in text and END in text, "docs/architecture.md lost the unit pieces table"
    written = text.split(BEGIN, 1)[1].split(END, 1)[0].strip()
    assert written == pieces_table(), (
        "docs/architecture.md: the table 'A unit's pieces' differs from the registry; "
        "it should read:\n" + pieces_table())


def test_layouts_are_the_hardware_units():
    """The registry's layouts are the ones the RTL units store (word counts per unit)."""
    array = TileArray(2, 2, 4, compute_unit=PCU, capacity_bytes=1024)
    layouts = unit_layouts(4, 4)
    for (row, col), unit in array.units.items():
        kind = array.unit_kind(row, col)
        assert config_words(layouts[kind]) == config_words(unit.config_layout), kind
    for switch in array.switches.values():
        assert config_words(layouts[UnitKind.SWITCH]) == config_words(switch.config_layout)
    assert config_words(layouts[UnitKind.PCU]) == config_words(pcu_config_layout(4, 4))


def test_model_builds_from_the_registry():
    model = FunctionalArray(2, 2, 4, capacity_bytes=1024)
    assert model.layouts == unit_layouts(4, 4)
    model.loaded = True
    _, _, switches, units, _ = model.build_run(None, [])
    assert {type(unit) for unit in units} == {UNITS[UnitKind.PCU].model,
                                              UNITS[UnitKind.PMU].model}
    assert {type(net) for net in switches} == {UNITS[UnitKind.SWITCH].model}


def test_decoders_invert_the_encoders():
    from rdu.ir import AccessPattern
    from rdu.units import pcu as pcu_encoder
    config = {"mode": "simd", "trips": [4, 2], "stages": [("MUL", "PREV", "CONST", "PREV", 7)],
              "reduce": "SUM", "tail": "EXP"}
    words = UNITS[UnitKind.PCU].encoder(config, lanes=4, stages=2)
    fields = UNITS[UnitKind.PCU].decode(words, lanes=4, stages=2)
    assert fields == pcu_encoder.fields(config, 2)
    named = UNITS[UnitKind.PCU].named_fields(fields)
    assert (named["mode"], named["reduce"], named["tail"]) == ("SIMD", "SUM", "EXP")
    assert named["stages"][0]["op"] == "MUL" and named["stages"][0]["src_b"] == "CONST"
    assert named["stages"][1]["op"] == "PASS"

    class Load:
        name = "load"
        config = {"bf16": True}
        pattern = AccessPattern(64, (2, 3, 1), (32, 64, 0))
    words = UNITS[UnitKind.AGCU].encoder(load=Load(), lanes=4)
    fields = UNITS[UnitKind.AGCU].decode(words, lanes=4, stages=2)
    assert fields == agcu_encoder.fields(load=Load(), lanes=4)
    assert UNITS[UnitKind.AGCU].named_fields is fields_as_stored


def test_switch_decoder_names_routes_and_merges():
    fields = UNITS[UnitKind.SWITCH].decode([0] * 16, lanes=4, stages=4)
    fields["vector"][2] = 5                                # south <- local
    fields["scalar_merge"][0] = [2, 0, 0, 1, 0]            # north <- merge north x2, west x1
    named = UNITS[UnitKind.SWITCH].named_fields(fields)
    assert named["vector"] == {"south": "local"}
    assert named["scalar"] == {"north": "merge north x2, west x1"}
    assert named["control"] == {}


def _options(unit):
    return {key: value for key, value in vars(unit).items()
            if isinstance(value, (bool, int, str))}


@pytest.mark.parametrize("name, options", [("standard", {}), ("fpga", FPGA_PCU_OPTIONS)])
def test_pcu_variants_build_the_named_compute_units(name, options):
    """A PCUVariant object builds the PCU with its options, and an array takes it as its
    compute unit."""
    assert list(PCU_VARIANTS) == ["standard", "fpga"]
    variant = PCU_VARIANTS[name]
    assert variant.name == name and variant.rtl is PCU
    built, named = variant(lanes=4), PCU(lanes=4, **options)
    assert type(built) is type(named)
    assert _options(built) == _options(named)
    array = TileArray(2, 2, 4, compute_unit=variant, capacity_bytes=1024)
    assert _options(array.units[0, 0]) == _options(named)
    assert repr(variant) == f"PCUVariant({name!r})"


def test_pcu_variant_checks_its_geometry():
    PCU_VARIANTS["standard"].check(8, 4)
    PCU_VARIANTS["fpga"].check(4, 4)
    with pytest.raises(ValueError):
        PCU_VARIANTS["fpga"].check(8, 4)
