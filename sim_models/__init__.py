"""Models of what surrounds the chip: off-chip memories (HBM, DDR) and the host link.

See ``docs/memory.md``: :mod:`sim_models.memory` (storage and timing),
:mod:`rdu.sim.memory_system` (address map and AXI4 front end),
:mod:`sim_models.gateware_memory` (a gateware model kept for speed comparisons).
"""
