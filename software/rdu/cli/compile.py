"""``rdu compile``: compile a kernel into a program file (manifest + bitstream), or run a
prefix of the pass pipeline (``--passes``, ``--skip``, ``--dump-after``)."""

import time
from pathlib import Path

from rdu.apps.onnx_groups import describe_stage
from rdu.apps.unfused import Sequence
from rdu.bitstream import to_bytes
from rdu.cli.common import (
    CommandError,
    add_command,
    add_kernel_options,
    check_output,
    print_report,
    program_for,
)
from rdu.compiler import PIPELINE, PassSelectionError
from rdu.compiler.core import select_passes
from rdu.frontend.kernels import KERNELS
from rdu.runtime import roofline


def pass_selection(args):
    """The passes ``rdu compile`` runs (``--passes``, ``--skip``), checked: one line
    naming a pass that does not exist or whose input a skipped pass writes."""
    passes = [name.strip() for name in args.passes.split(",")] if args.passes else None
    skip = tuple(args.skip or ())
    if (passes or skip) and args.target not in KERNELS and not args.target.endswith(".onnx"):
        raise CommandError(f"{args.target}: --passes and --skip compile a kernel by name "
                           f"or a model")
    try:
        names = select_passes(PIPELINE, passes, skip)
    except PassSelectionError as error:
        raise CommandError(f"{'--skip' if skip else '--passes'}: {error}") from None
    return passes, skip, names[-1] == PIPELINE[-1]


def cmd_compile(args):
    """``rdu compile``: compile, write the program (and bitstream), report."""
    start = time.perf_counter()
    args.passes_selected, args.passes_skipped, emits = pass_selection(args)
    if emits and not args.output:
        args.usage_error("the following arguments are required: -o/--output")
    if args.output:
        check_output(args.output)
    if args.execution != "fused" and not args.target.endswith(".onnx"):
        raise CommandError(f"{args.target}: 'rdu compile --execution unfused' cuts an ONNX "
                           f"model; a kernel by name runs unfused with 'rdu run "
                           f"--execution unfused'")
    kernel, program, _, _ = program_for(args)
    if program is None:
        ran = ", ".join(args.compilation.seconds)
        print_report({"passes": ran, "program": "none (emit did not run: no file written)",
                      "compile_seconds": round(time.perf_counter() - start, 2)}, args.json)
        return 0
    if isinstance(program, Sequence):
        return _write_sequence(args, kernel, program, start)
    program.write(args.output)
    if args.bitstream:
        check_output(args.bitstream)
        Path(args.bitstream).write_bytes(to_bytes(program.bitstream))
    meta = program.meta
    report = {
        "kernel": kernel.describe(program),
        "machine": program.machine.describe(),
        "mapping": meta["mapping"],
        "tiling": meta["tiling"],
        "program": f"{args.output} ({len(program.bitstream)} bitstream words)",
        "roofline": _roofline([program], args.json),
        "compile_seconds": round(time.perf_counter() - start, 2),
    }
    if args.bitstream:
        report["bitstream"] = args.bitstream
    print_report(report, args.json)
    return 0


def _roofline(programs, as_json):
    """The bound of ``programs``' work on their machine (:mod:`rdu.roofline`, untimed):
    the ``roofline`` object of ``--json``, or its line."""
    line = roofline(programs)
    return line.to_json() if as_json else line.describe()


def sequence_paths(output, count):
    """The program files of a model of ``count`` configurations written for ``-o
    output``: ``NAME.1.rdu`` ... ``NAME.<count>.rdu`` beside it."""
    path = Path(output)
    return [path.with_name(f"{path.stem}.{index}{path.suffix or '.rdu'}")
            for index in range(1, count + 1)]


def _write_sequence(args, kernel, sequence, start):
    """``rdu compile MODEL.onnx`` of several configurations: one program file each."""
    if args.bitstream:
        raise CommandError(f"{args.target} is {len(sequence.stages)} configurations: "
                           f"--bitstream writes one (each program file holds its own)")
    paths = sequence_paths(args.output, len(sequence.stages))
    report = {"kernel": kernel.describe(None), "machine": sequence.machine.describe(),
              "configurations": len(sequence.stages)}
    for index, (stage, path) in enumerate(zip(sequence.stages, paths, strict=True), 1):
        stage.program.write(path)
        report[f"configuration {index}"] = (f"{path} ({len(stage.program.bitstream)} "
                                            f"bitstream words): {stage.name}: "
                                            f"{describe_stage(stage)}")
    report["roofline"] = _roofline([stage.program for stage in sequence.stages], args.json)
    report["compile_seconds"] = round(time.perf_counter() - start, 2)
    print_report(report, args.json)
    return 0


def add_parsers(commands):
    """``rdu compile`` on the subparsers object ``commands``."""
    compile_ = add_command(commands, "compile", "compile a kernel into a program file "
                                                "(manifest + bitstream)")
    add_kernel_options(compile_, run=False)
    compile_.add_argument("-o", "--output", metavar="FILE.rdu",
                          help="program file to write (required when emit runs); a model "
                               "of several configurations writes FILE.1.rdu, FILE.2.rdu, "
                               "... one per configuration")
    compile_.add_argument("--execution", choices=["fused", "unfused"], default="fused",
                          help="an ONNX model: fused, as few configurations as the "
                               "compiler fuses; unfused, cut into its groups even when "
                               "one configuration would do (docs/onnx.md)")
    compile_.add_argument("--bitstream", metavar="FILE.bin",
                          help="also write the bare bitstream (what AGCU 0 loads)")
    compile_.add_argument("--json", action="store_true", help="print the report as JSON")
    compile_.add_argument("--dump-after", metavar="PASS", choices=[*PIPELINE, "all"],
                          help=f"print what a pass produced, with its time, on stderr "
                               f"({', '.join(PIPELINE)} or all)")
    compile_.add_argument("--passes", metavar="P1,P2,...",
                          help=f"run only these passes, in pipeline order "
                               f"({','.join(PIPELINE)}); each must find what it reads "
                               f"written by a pass before it, e.g. fuse,tile,lower (no "
                               f"program is written without emit)")
    compile_.add_argument("--skip", metavar="PASS", action="append",
                          help="leave pass PASS out (repeatable; --skip check: no "
                               "deadlock check); refused when a pass after it reads "
                               "what it writes")
    compile_.set_defaults(func=cmd_compile, usage_error=compile_.error)
