"""The IP top's deliverables: its Verilog, the C header and the register documentation.

All three come from the SystemRDL source ``hdl/rdu_ip.rdl`` (:mod:`hdl.regmap`): the
gateware's register file is built from the compiled map, ``rdu_regs.h`` is written by
PeakRDL's C header exporter (``peakrdl-cheader``) and ``rdu_regs.md`` by its Markdown
exporter (``peakrdl-markdown``). ``rdu verilog --ip`` calls :func:`write_ip`.
"""

from pathlib import Path

from hdl.config_net import LoaderState
from hdl.ip import ERROR_CODES
from hdl.regmap import rdl_root, register_map

from ..sim.verilator import generate_verilog
from .designs import get_design

__all__ = ["HEADER_NAME", "DOC_NAME", "encodings", "write_header", "write_register_doc",
           "write_ip"]

HEADER_NAME = "rdu_regs.h"
DOC_NAME = "rdu_regs.md"


def encodings():
    """``[(register, field, {name: value})]``: the values of ``STATUS.CONFIG_STATE``
    (:class:`hdl.config_net.LoaderState`), of every encoded field (from the SystemRDL
    ``encode`` enumerations) and of ``ERROR.CODE`` per ``ERROR.SOURCE`` (the units' own
    enumerations, :data:`hdl.ip.ERROR_CODES`)."""
    found = [("STATUS", "CONFIG_STATE", {member.name: member.value for member in LoaderState})]
    for register in register_map().registers:
        for field in register.fields:
            if field.encode is not None:
                found.append((register.name, field.name,
                              {member.name: member.value for member in field.encode}))
    for source, codes in ERROR_CODES.items():
        found.append(("ERROR", f"CODE__{source}",
                      {member.name: member.value for member in codes}))
    return found


def write_header(path):
    """Write the C header of the register map (``peakrdl-cheader``) to ``path``, with
    a ``#define`` per value of every encoded field (:func:`encodings`)."""
    from peakrdl_cheader.exporter import CHeaderExporter  # the 'ip' extra
    path = Path(path)
    CHeaderExporter().export(rdl_root().top, str(path))
    lines = ["// values of the encoded fields (ERROR.SOURCE; ERROR.CODE per source)"]
    for register, field, values in encodings():
        lines += [f"#define RDU_IP__{register}__{field}__{name} {value}"
                  for name, value in values.items()]
    text = path.read_text()
    anchor = "#ifdef __cplusplus\n}"
    index = text.rindex(anchor)
    path.write_text(text[:index] + "\n".join(lines) + "\n\n" + text[index:])
    return path


def write_register_doc(path):
    """Write the Markdown register documentation (``peakrdl-markdown``) to ``path``,
    with a table of the values of every encoded field (:func:`encodings`)."""
    from peakrdl_markdown import MarkdownExporter  # the 'ip' extra
    path = Path(path)
    MarkdownExporter().export(rdl_root().top, str(path))
    lines = ["", "## Encoded fields", ""]
    for register, field, values in encodings():
        lines += [f"### {register}.{field.replace('__', ' when SOURCE = ')}", "",
                  "| value | name |", "|---|---|"]
        lines += [f"| {value} | {name} |" for name, value in values.items()]
        lines.append("")
    path.write_text(path.read_text().rstrip("\n") + "\n" + "\n".join(lines))
    return path


def write_ip(out_dir, design="ip_2x2"):
    """Write ``<design>.v`` (top module ``<design>``), ``rdu_regs.h`` and ``rdu_regs.md``
    into ``out_dir``; returns their paths."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    verilog = out_dir / f"{design}.v"
    verilog.write_text(generate_verilog(get_design(design).instantiate(), design))
    return [verilog, write_header(out_dir / HEADER_NAME),
            write_register_doc(out_dir / DOC_NAME)]
