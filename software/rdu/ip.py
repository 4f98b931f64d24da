"""The IP top's deliverables: its Verilog, the C header and the register documentation.

All three come from the SystemRDL source ``hdl/rdu_ip.rdl`` (:mod:`hdl.regmap`): the
gateware's register file is built from the compiled map, ``rdu_regs.h`` is written by
PeakRDL's C header exporter (``peakrdl-cheader``) and ``rdu_regs.md`` by its Markdown
exporter (``peakrdl-markdown``). ``rdu verilog --ip`` calls :func:`write_ip`.
"""

from pathlib import Path

__all__ = ["HEADER_NAME", "DOC_NAME", "write_header", "write_register_doc", "write_ip"]

HEADER_NAME = "rdu_regs.h"
DOC_NAME = "rdu_regs.md"


def write_header(path):
    """Write the C header of the register map (``peakrdl-cheader``) to ``path``."""
    from peakrdl_cheader.exporter import CHeaderExporter

    from hdl.regmap import rdl_root
    path = Path(path)
    CHeaderExporter().export(rdl_root().top, str(path))
    return path


def write_register_doc(path):
    """Write the Markdown register documentation (``peakrdl-markdown``) to ``path``."""
    from peakrdl_markdown import MarkdownExporter

    from hdl.regmap import rdl_root
    path = Path(path)
    MarkdownExporter().export(rdl_root().top, str(path))
    return path


def write_ip(out_dir, design="ip_2x2"):
    """Write ``<design>.v`` (top module ``<design>``), ``rdu_regs.h`` and ``rdu_regs.md``
    into ``out_dir``; returns their paths."""
    from .designs import get_design
    from .sim.verilator import generate_verilog
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    verilog = out_dir / f"{design}.v"
    verilog.write_text(generate_verilog(get_design(design).instantiate(), design))
    return [verilog, write_header(out_dir / HEADER_NAME),
            write_register_doc(out_dir / DOC_NAME)]
