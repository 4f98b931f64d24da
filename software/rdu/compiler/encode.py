"""Pass ``encode``: every unit's configuration words, through its encoder, into a
bitstream.

Every PCU, PMU and switch of the array gets a record, then one record per AGCU holding
the load and store placed on it. Each is a clear record (``rdu.bitstream.cleared``): the
unit's configuration is zeroed first, so nothing of a previous kernel survives, and the
record leaves out its trailing zero words (a unit the kernel does not use is one word).
The encoders are :mod:`rdu.units`.
"""

from ..bitstream import Geometry, UnitKind, cleared, write_bitstream
from ..units import agcu as agcu_unit
from ..units import pcu as pcu_unit
from ..units import pmu as pmu_unit
from ..units import switch as switch_unit
from ..units.pcu import UnitConfigError
from .core import CompileError, register

__all__ = ["agcu_index", "encode_mapping"]


def agcu_index(geometry, site):
    """The AGCU number of an AGCU site (its position in ``geometry.agcu_rows``)."""
    side = "west" if site.col < 0 else "east"
    return geometry.agcu_rows.index((side, site.row))


def encode_mapping(kernel, mapping, stages, agcus):
    """The bitstream words of a placed, routed and bound kernel."""
    geometry = mapping.geometry
    sites = mapping.placement.sites
    lanes = geometry.lanes
    by_position = {}
    for name, site in sites.items():
        if site.unit != "agcu":
            by_position[site.row, site.col] = kernel.nodes[name]
    switches = switch_unit.encode_all(mapping)
    records = []
    for row in range(geometry.rows):
        for col in range(geometry.cols):
            kind = UnitKind[geometry.unit_at(row, col).upper()]
            node = by_position.get((row, col))
            if kind == UnitKind.PCU:
                words = (pcu_unit.encode(node.config, lanes, stages, node.name) if node
                         else pcu_unit.idle(lanes, stages))
            else:
                words = pmu_unit.encode(node.config, node.name) if node else pmu_unit.idle()
            records.append(cleared(kind, row, col, words))
            records.append(cleared(UnitKind.SWITCH, row, col, switches[row, col]))
    slots = {index: {} for index in range(agcus)}
    for name, site in sites.items():
        if site.unit == "agcu":
            slots[agcu_index(geometry, site)][site.slot] = kernel.nodes[name]
    for index, placed in slots.items():
        records.append(cleared(UnitKind.AGCU, 0, index,
                               agcu_unit.encode(placed.get("load"), placed.get("store"),
                                                lanes=lanes)))
    return write_bitstream(Geometry(geometry.rows, geometry.cols, lanes), records)


@register("encode", "unit configurations -> configuration words -> bitstream",
          reads=("kernel", "mapping", "machine", "blocks"), writes=("bitstream",))
def encode(state):
    try:
        state.bitstream = encode_mapping(state.kernel, state.mapping, state.machine.stages,
                                         state.machine.agcus)
    except UnitConfigError as error:
        raise CompileError(f"{state.kernel.name}: {error}") from None
    return f"  {len(state.bitstream)} words"
