"""Applications above the runtime: the Composition of Experts scenario (:mod:`.coe`),
the sweep engine and its plots (:mod:`.sweep`, :mod:`.sweep_plots`), kernel-by-kernel
execution (:mod:`.unfused`), the registered designs (:mod:`.designs`), the IP block's
deliverables (:mod:`.ip`) and the FPGA flow (:mod:`.fpga`). Nothing in the core
(runtime, compiler, models, simulation layer) imports them."""
