"""The ``rdu`` command line: one module per command, each adding its subparser.

``rdu run``      compile a kernel or an ONNX model (or read a program file), run it on
                 the functional model or the RTL, check it against numpy (and an ONNX
                 model against onnxruntime, :mod:`rdu.onnx`) (:mod:`rdu.cli.run`)
``rdu sim``      the main job: a GEMM on the default machine under Verilator
                 (:mod:`rdu.cli.run`)
``rdu compile``  compile a kernel into a program file (manifest + bitstream)
                 (:mod:`rdu.cli.compile`)
``rdu inspect``  print a program's manifest and every unit's fields (:mod:`rdu.cli.inspect`)
``rdu sweep``    a grid of kernels x shapes x machines x tiers x seeds on Ray, to a table
                 (:mod:`rdu.cli.sweep`)
``rdu speed``    simulation speed of a stream FIFO in both tiers, side by side
                 (:mod:`rdu.cli.speed`)
``rdu verilog``  write Verilog of every registered design (and lint it)
                 (:mod:`rdu.cli.verilog`)
``rdu run coe``  Composition of Experts, a parser of its own (:mod:`rdu.cli.coe`)

What the commands share (parser classes, machine and kernel options, program loading,
the error handling) is in :mod:`rdu.cli.common`. A new command is a module with an
``add_parsers(commands)`` function and a line in :data:`COMMANDS`.

Exit status: 0 ok; 1 a result differs from its reference; 2 bad input or a run that
did not end cleanly, with one line on stderr that says what and where.
"""

import sys
from importlib import metadata

from rdu.bitstream import VERSION as BITSTREAM_VERSION
from rdu.cli import coe, compile, generate, inspect, run, speed, sweep, verilog
from rdu.cli.common import HelpFormatter, Parser, run_command
from rdu.program import FORMAT as PROGRAM_FORMAT

__all__ = ["main", "build_parser", "COMMANDS", "version_text"]

#: The distribution that installs the ``rdu`` package (``pyproject.toml``).
DISTRIBUTION = "rdu-sim"


def version_text():
    """``rdu --version``: the package's version and the file formats it reads and writes."""
    try:
        version = metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        version = "(not installed: run from a source tree)"
    return (f"rdu {version} ({DISTRIBUTION}); bitstream format {BITSTREAM_VERSION}, "
            f"program file format {PROGRAM_FORMAT}")

#: The command modules, in the order ``rdu --help`` lists their commands; each has
#: ``add_parsers(commands)``, which adds its subparsers with their handler as ``func``.
COMMANDS = (run, compile, generate, inspect, speed, sweep, verilog)


def build_parser():
    """The ``rdu`` parser, assembled from :data:`COMMANDS`."""
    parser = Parser(
        prog="rdu", formatter_class=HelpFormatter,
        description="Reconfigurable Dataflow Unit model: compile kernels into programs, "
                    "inspect them, run them on the functional model or the RTL.",
        epilog="Exit status: 0 ok, 1 a result differs from its reference, 2 bad input or "
               "a run that did not end cleanly (one line on stderr says what and where).")
    parser.add_argument("--version", action="version", version=version_text(),
                        help="print the package version and the bitstream and program "
                             "file formats, and exit")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND",
                                     parser_class=Parser)
    for command in COMMANDS:
        command.add_parsers(commands)
    return parser


def main(argv=None):
    """Run the ``rdu`` command of ``argv`` (default: the process's); its exit status."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:len(coe.PREFIX)] == coe.PREFIX:
        args = coe.parse_args(argv[len(coe.PREFIX):])
    else:
        args = build_parser().parse_args(argv)
    return run_command(args)
