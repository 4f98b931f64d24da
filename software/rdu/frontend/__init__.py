"""The front end: kernels written as graphs of operators (:mod:`rdu.frontend.graph`),
the kernels known by name (:mod:`rdu.frontend.kernels`), and the GEMM and attention
kernels with their packing helpers and references (:mod:`rdu.frontend.gemm`,
:mod:`rdu.frontend.attention`)."""
