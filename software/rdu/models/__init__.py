"""The reference and functional models of the RDU (``docs/funcmodel.md``).

* :mod:`rdu.models.fp`: bit-exact FP32/BF16 arithmetic of ``hdl/fp.py``;
* :mod:`rdu.models.pcu_reference`: the PCU's systolic and SIMD arithmetic, bit-exact;
* :mod:`rdu.models.reference`: the kernels' expected outputs (numpy and bit-exact);
* the functional model, item by item: :mod:`rdu.models.shared` (queues, lazy items,
  flat memory, errors), one module per unit (:mod:`rdu.models.switch`,
  :mod:`rdu.models.pmu`, :mod:`rdu.models.pcu`, :mod:`rdu.models.agcu`), the array
  (:mod:`rdu.models.array`: ``FunctionalArray``) and the machine
  (:mod:`rdu.models.machine`: memory, AGCU commands, program sequences, ``run_program``).
"""
