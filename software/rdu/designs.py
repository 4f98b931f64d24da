"""Registry of the top-level designs the tools can elaborate.

``rdu verilog`` writes each of these to Verilog and lints it; the test harness and
``rdu sim`` build them under Verilator. A design is a component class and the
constructor parameters of one configuration.
"""

from dataclasses import dataclass, field

__all__ = ["Design", "DESIGNS", "get_design"]


@dataclass(frozen=True)
class Design:
    name: str
    module: str
    cls_name: str
    params: dict = field(default_factory=dict)
    description: str = ""

    def load_class(self):
        import importlib
        return getattr(importlib.import_module(self.module), self.cls_name)

    def instantiate(self):
        return self.load_class()(**self.params)


DESIGNS = {design.name: design for design in [
    Design("stream_fifo", "hdl.stream_fifo", "StreamFIFO", {"shape": 256, "depth": 4},
           "vector-width stream FIFO (the per-port buffer of every unit)"),
]}


def get_design(name):
    try:
        return DESIGNS[name]
    except KeyError:
        raise ValueError(f"unknown design {name!r}; known: {', '.join(sorted(DESIGNS))}"
                         ) from None
