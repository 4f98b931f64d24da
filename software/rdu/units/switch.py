"""The switch's encoder and decoder: a mapping's routes -> ``hdl.switch`` configuration
words (:func:`encode_all`), decoded fields -> routes by port name (:func:`named_fields`).

Every route (:class:`rdu.mapper.Route`) sets, at each switch it passes, the select code
of each output it drives (the :class:`hdl.switch.Port` it comes from) and, where branches
of a merge join, the items taken from each input per turn.
"""

from hdl.interfaces import NETWORKS
from hdl.switch import (
    NARROW_OUTPUTS,
    VECTOR_OUTPUTS,
    Port,
    Source,
    VectorOutput,
    switch_config_layout,
)

from ..unitconfig import code_name, pack_config
from .pcu import UnitConfigError

__all__ = ["fields_by_switch", "encode_all", "named_fields", "MAX_MERGE_COUNT"]

#: The mapper's port names -> hdl.switch input indices (Port) and route codes (Source).
_IN_PORT = {port.name.lower(): port for port in Port}
#: Items per turn a merge count field holds.
MAX_MERGE_COUNT = 255


def _out_index(port):
    """The switch output index of a mapper output port (``"local.vector_in1"`` is the
    PCU's second vector input; every other local port is output ``LOCAL0`` / ``LOCAL``)."""
    if port in _IN_PORT and port != "local":
        return int(_IN_PORT[port])
    return VectorOutput.LOCAL1 if port == "local.vector_in1" else VectorOutput.LOCAL0


def fields_by_switch(mapping):
    """Switch configuration fields by grid position of a mapping's routes."""
    geometry = mapping.geometry
    outputs = {"vector": len(VectorOutput), "scalar": len(Port), "control": len(Port)}
    configs = {}
    for row in range(geometry.rows):
        for col in range(geometry.cols):
            fields = {network: [0] * outs for network, outs in outputs.items()}
            for network, outs in outputs.items():
                fields[f"{network}_merge"] = [[0] * len(Port) for _ in range(outs)]
            configs[row, col] = fields
    for route in mapping.routes:
        for switch, outs in route.hops.items():
            for out_port, in_port in outs.items():
                configs[switch][route.network][_out_index(out_port)] = _IN_PORT[in_port].source
        for switch, outs in route.merges.items():
            for out_port, counts in outs.items():
                entry = configs[switch][f"{route.network}_merge"][_out_index(out_port)]
                for in_port, count in counts.items():
                    if count > MAX_MERGE_COUNT:
                        raise UnitConfigError(
                            f"merge {route.stream!r} takes {count} items per turn at switch "
                            f"{switch}; a switch takes at most {MAX_MERGE_COUNT}")
                    entry[_IN_PORT[in_port]] = count
    return configs


def encode_all(mapping):
    """``{(row, col): words}`` for every switch of the mapping's array."""
    layout = switch_config_layout()
    return {position: pack_config(layout, fields)
            for position, fields in fields_by_switch(mapping).items()}


def named_fields(fields):
    """Decoded switch ``fields`` as routes ``{network: {output: input}}`` by the
    hardware's port names (``"merge north x2, local x1"`` for a merge; ``rdu inspect``)."""
    named = {}
    for network in NETWORKS:
        outputs = VECTOR_OUTPUTS if network == "vector" else NARROW_OUTPUTS
        routes = {}
        for output, select in zip(outputs, fields[network], strict=True):
            counts = fields[f"{network}_merge"][outputs.index(output)]
            if any(counts):
                inputs = [f"{code_name(Source, index + 1).lower()} x{count}"
                          for index, count in enumerate(counts) if count]
                routes[output] = "merge " + ", ".join(inputs)
            elif select:
                routes[output] = code_name(Source, select).lower()
        named[network] = routes
    return named
