"""One encoder per unit kind: IR configuration data -> the unit's configuration words.

Each module sits beside one unit's configuration layout (imported from ``hdl``) and is
the only code that turns the compiler's IR data (:attr:`rdu.ir.Node.config`, with
:class:`rdu.ir.AccessPattern` for address patterns) into that layout's fields:

* :mod:`rdu.units.pcu`: ``hdl.pcu_config.pcu_config_layout`` (systolic or SIMD stage program);
* :mod:`rdu.units.pmu`: ``hdl.pmu.pmu_config_layout`` (buffers, generators, predicate);
* :mod:`rdu.units.agcu`: ``hdl.agcu.agcu_config_layout`` (load and store patterns);
* :mod:`rdu.units.switch`: ``hdl.switch.switch_config_layout`` (routes and merges).

The PCU's and the switch's modules also name the decoded fields' codes (``rdu inspect``).
:mod:`rdu.units.registry` maps each :class:`hdl.config_net.UnitKind` to all of a
unit's pieces: RTL class, layout, encoder, decoder, functional model, reference, docs.
"""
