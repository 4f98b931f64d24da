"""What the ``rdu`` commands share: the parser classes, the machine options, the kernel
options and program loading of ``rdu run``/``compile``, the output checks and report, and
the one-line error handling that maps an error to the exit status.

Exit status: 0 ok; 1 a result differs from its reference (:class:`WrongResult`); 2 bad
input or a run that did not end cleanly, with one line on stderr that says what and where.
"""

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np

from hdl.fp_latency import FP_LATENCY_CHOICES
from rdu.apps.onnx_groups import compile_groups, needs_groups
from rdu.apps.sweep import SweepError
from rdu.apps.unfused import compile_unfused
from rdu.compiler import reporting_progress
from rdu.compiler.core import CompileError
from rdu.compiler.place import ROUTERS, routing
from rdu.frontend.kernels import INPUT_DTYPES, KERNELS, get_kernel
from rdu.machine import MACHINE_OPTIONS, Machine
from rdu.onnx import KERNEL_NAME as ONNX_KERNEL
from rdu.onnx import onnx_kernel
from rdu.program import Program
from rdu.runtime import RunFailure
from rdu.units.registry import PCU_VARIANTS

__all__ = ["CommandError", "WrongResult", "bind_dims", "Parser", "HelpFormatter", "add_command",
           "add_machine_options", "machine_overrides", "machine_for", "add_kernel_options",
           "load_array", "size_option", "kernel_params", "program_for", "check_output",
           "print_report", "run_command"]


class CommandError(Exception):
    """An error reported to the user as one line, exit status 2."""


class WrongResult(Exception):
    """The hardware's (or model's) result differs from the reference: exit 1."""


# -- parsers --------------------------------------------------------------------------------

class Parser(argparse.ArgumentParser):
    """Usage errors as one line (``rdu run: error: ...``), exit status 2."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Help that shows every option's default (where it has one)."""

    def _get_help_string(self, action):
        text = action.help or ""
        if action.default not in (None, False, argparse.SUPPRESS) and \
                "%(default)" not in text and action.option_strings:
            text += " (default: %(default)s)"
        return text


def add_command(commands, name, help_text, description=None):
    """A subcommand ``name`` of the subparsers object ``commands``, with the rdu help."""
    return commands.add_parser(name, help=help_text, description=description or help_text,
                               formatter_class=HelpFormatter)


# -- machines -------------------------------------------------------------------------------

def add_machine_options(cmd, defaults):
    """The machine options (``--rows`` ... ``--pcu``) of command ``cmd``; ``defaults``:
    the default machine's values as defaults (else None: a program file's machine)."""
    group = cmd.add_argument_group(
        "machine", "the system to compile for or run on (a program file records its "
                   "own; given with one, they must match it)")
    reference = Machine()
    for option, (field, scale, text) in MACHINE_OPTIONS.items():
        default = getattr(reference, field) // scale if defaults else None
        shown = getattr(reference, field) // scale
        group.add_argument(f"--{option.replace('_', '-')}", dest=option, type=int,
                           default=default, metavar="N",
                           help=f"{text} (default machine: {shown})")
    group.add_argument("--pcu", choices=list(PCU_VARIANTS),
                       default=reference.pcu if defaults else None,
                       help="the PCUs the RTL is built with: standard, or fpga (the "
                            "FPGA configuration's, docs/fpga.md: the same results, "
                            "exp and reciprocal 13 and 8 cycles per vector; needs "
                            f"--lanes <= --stages) (default machine: {reference.pcu})")
    group.add_argument("--fp-latency", dest="fp_latency", choices=list(FP_LATENCY_CHOICES),
                       default=reference.fp_latency if defaults else None,
                       help="the PCUs' SIMD stages and systolic PEs on combinational FP "
                            "operators (off) or on the pipelined ones of hdl.fp_latency "
                            "(default): the same results, more latency, GEMM tiles of 7 "
                            "column tiles (docs/pcu.md) (default machine: "
                            f"{reference.fp_latency})")


def machine_overrides(args):
    """The machine parameters given on the command line, as Machine fields."""
    overrides = {field: getattr(args, option) * scale
                 for option, (field, scale, _) in MACHINE_OPTIONS.items()
                 if getattr(args, option, None) is not None}
    if getattr(args, "pcu", None) is not None:
        overrides["pcu"] = args.pcu
    if getattr(args, "fp_latency", None) is not None:
        overrides["fp_latency"] = args.fp_latency
    return overrides


def machine_for(args, defaults=None):
    """The machine of the command line; ``defaults``: Machine fields a kernel needs
    unless the options say otherwise."""
    return Machine(**{**(defaults or {}), **machine_overrides(args)})


# -- kernels and programs -------------------------------------------------------------------

def add_kernel_options(cmd, run):
    """The target, the kernel shape and choice options, the input arrays (``run``: the
    target may be a program file) and the machine options of ``rdu run``/``compile``."""
    cmd.add_argument("target", metavar="KERNEL|MODEL.onnx" if not run
                     else "KERNEL|MODEL.onnx|PROGRAM",
                     help=f"kernel to compile ({', '.join(sorted(KERNELS))}), or an ONNX "
                          f"model (docs/onnx.md)"
                     + (", or a program file written by 'rdu compile'" if run else ""))
    kinds = "; ".join(f"{k.name}: {k.help}" for k in KERNELS.values())
    shapes = cmd.add_argument_group(f"kernel shape ({kinds})")
    params = sorted({p for k in KERNELS.values() for p in k.params})
    tensors = []
    for kernel in KERNELS.values():
        tensors += [t for t in kernel.inputs if t not in tensors]
    for name in params:
        defaults = [f"{k.name}: {k.defaults[name][1]}" for k in KERNELS.values()
                    if name in k.defaults]
        both = name in tensors and run     # a size of one kernel, a tensor of another
        users = [k.name for k in KERNELS.values() if name in k.inputs]
        shapes.add_argument(f"--{name.replace('_', '-')}", dest=name,
                            type=str if both else int,
                            metavar=f"{name.upper()}" + (f"|{name.upper()}.npy" if both
                                                         else ""),
                            help=f"{name.upper()}; with a program file it must match, "
                                 f"with input arrays it can be left out"
                                 + (f" (default {', '.join(defaults)})" if defaults
                                    else "")
                                 + (f"; for {', '.join(users)}: the tensor "
                                    f"{name.upper()} as a float .npy array" if both
                                    else ""))
    for name, (_, default, text) in {n: o for k in KERNELS.values()
                                     for n, o in k.options.items()}.items():
        shapes.add_argument(f"--{name.replace('_', '-')}", dest=name, type=int,
                            default=None, metavar=name.upper(),
                            help=f"{text} (default {default})")
    for kernel in KERNELS.values():
        for name, (values, default, text) in kernel.choices.items():
            if values == (False, True):         # a flag
                shapes.add_argument(f"--{name}", action="store_const", const=True,
                                    default=None, help=text)
            else:
                shapes.add_argument(f"--{name.replace('_', '-')}", dest=name,
                                    choices=values, default=None,
                                    help=f"{text} (default {default})")
    if run:
        data = cmd.add_argument_group(
            "data", f"the kernel's inputs as .npy arrays of {INPUT_DTYPES}, rounded to "
                    f"BF16; default: random with --seed")
        for tensor in tensors:
            if tensor in params:
                continue                    # the size option takes it (above)
            users = [k.name for k in KERNELS.values() if tensor in k.inputs]
            data.add_argument(f"--{tensor}", metavar=f"{tensor.upper()}.npy",
                              help=f"{tensor.upper()} ({', '.join(users)})")
        data.add_argument("--input", action="append", metavar="NAME=FILE.npy",
                          help="an ONNX model's input NAME (repeatable; every input or "
                               "none: random with --seed)")
    cmd.add_argument("--bind", action="append", metavar="NAME=VALUE",
                     help="a dynamic dimension of an ONNX model and its value "
                          "(repeatable; by default a past's length is 0, the "
                          "sequence's that of an --input file: docs/onnx.md, 'A KV "
                          "cache')")
    cmd.add_argument("--router", choices=ROUTERS, default=None,
                     help="how the compiler routes the streams of a placement: greedy, one "
                          "after the other (the default), or negotiated, all together "
                          "(PathFinder; large arrays, docs/compiler.md)")
    add_machine_options(cmd, defaults=False)


def load_array(path, option):
    """The .npy array at ``path`` given by ``option`` (``--a``)."""
    try:
        return np.load(path, allow_pickle=False)
    except FileNotFoundError:
        raise CommandError(f"{option} {path}: no such file") from None
    except (ValueError, OSError):
        raise CommandError(f"{option} {path}: not a .npy array of numbers") from None


def size_option(args, name):
    """A kernel size option's value (an option that is also a tensor of another kernel,
    ``--k``, arrives as text)."""
    value = getattr(args, name, None)
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            raise CommandError(f"--{name} {value}: a size here, not a number") from None
    return value


def kernel_params(args, kernel, arrays):
    """The kernel's shape parameters and choices from its options and the user's arrays."""
    implied = kernel.params_from_inputs(arrays)
    params = {}
    for name, (_, default, _) in kernel.choices.items():
        given = getattr(args, name, None)
        params[name] = default if given is None else given
    for name in kernel.params:
        option = "--" + name.replace("_", "-")
        given, found = size_option(args, name), implied.get(name)
        if given is not None and found is not None and given != found:
            raise CommandError(f"{option} {given} contradicts the input arrays "
                               f"({name.upper()} = {found})")
        value = given if given is not None else found
        if value is None and name in kernel.defaults:
            value = kernel.defaults[name][0](params)
        if value is None:
            raise CommandError(f"{kernel.name} needs {option} (or input arrays that "
                               f"fix it)")
        if value < 1:
            raise CommandError(f"{option} must be at least 1, not {value}")
        params[name] = value
    for name, (function, _, _) in kernel.options.items():
        value = getattr(args, name, None)
        if value is not None and value < 1:
            raise CommandError(f"--{name.replace('_', '-')} must be at least 1, not {value}")
        params[name] = function(params) if value is None else value
    return params


def _user_arrays(args, kernel, arrays, sources):
    """Read the kernel's input arrays the options name into ``arrays``, with where from."""
    if getattr(args, "input", None):
        raise CommandError(f"--input NAME=FILE.npy gives an ONNX model's inputs; "
                           f"{kernel.name} takes "
                           f"{' '.join(f'--{t} {t.upper()}.npy' for t in kernel.inputs)}")
    for tensor in kernel.inputs:
        path = getattr(args, tensor, None)
        if path:
            arrays[tensor] = load_array(path, f"--{tensor}")
            sources[tensor] = f"--{tensor} {path}"


def _input_files(args):
    """``[(text, name, array)]`` of the ``--input NAME=FILE.npy`` options, each file read
    once (one line for a malformed option or file)."""
    files = []
    for text in getattr(args, "input", None) or ():
        name, equals, path = text.partition("=")
        if not equals or not name or not path:
            raise CommandError(f"--input {text}: give NAME=FILE.npy")
        files.append((text, name, load_array(path, f"--input {name}")))
    return files


def _onnx_arrays(kernel, files):
    """``(arrays, sources)`` of the ``--input`` ``files`` (:func:`_input_files`) for an
    ONNX model's inputs."""
    arrays, sources = {}, {}
    for text, name, array in files:
        if name in kernel.imported.bound:
            raise CommandError(f"--input {text}: the prefill binds {name} (the past "
                               f"empty, positions 0 to L - 1, the attention mask ones); "
                               f"its inputs: {', '.join(kernel.data_inputs())}")
        if name not in kernel.data_inputs():
            raise CommandError(f"--input {text}: the model has no input {name!r}; its "
                               f"inputs: {', '.join(kernel.data_inputs())}")
        arrays[name] = array
        sources[name] = f"--input {text}"
    return arrays, sources


def _onnx_dims(args, files):
    """``(dims, shapes)`` binding an ONNX model's dynamic dimensions: ``--bind NAME=VALUE``
    and the shapes of the ``--input`` ``files`` (:func:`rdu.onnx.cache.bind`)."""
    return bind_dims(getattr(args, "bind", None)), {name: array.shape
                                                     for _, name, array in files}


def bind_dims(texts):
    """``{name: value}`` of ``--bind NAME=VALUE`` options ``texts`` (one line for a bad
    one)."""
    dims = {}
    for text in texts or ():
        name, equals, value = text.partition("=")
        try:
            dims[name] = int(value)
        except ValueError:
            raise CommandError(f"--bind {text}: give NAME=VALUE (a whole number)") from None
        if not equals or not name:
            raise CommandError(f"--bind {text}: give NAME=VALUE (a whole number)")
    return dims


def _compile(args, kernel, params):
    """Compile ``kernel`` with the pass options of ``rdu compile`` and ``--dump-after``."""
    state = []
    program = kernel.compile(machine_for(args, kernel.machine), state=state,
                             passes=getattr(args, "passes_selected", None),
                             skip=getattr(args, "passes_skipped", ()), **params)
    compilation = args.compilation = state[0]
    dump = getattr(args, "dump_after", None)
    if dump:
        for name, text in compilation.dumps.items():
            if dump in (name, "all"):
                print(f"== after {name} ({compilation.seconds[name] * 1000:.1f} ms)\n"
                      f"{text}", file=sys.stderr)
    return program


def _onnx_program(args):
    """``rdu run``/``compile MODEL.onnx``: import the model, compile it: one
    configuration when the compiler fuses it (``--execution fused``), else (or with
    ``--execution unfused``/``unfused-host``) a :class:`rdu.apps.unfused.Sequence` of
    configurations (:func:`rdu.apps.onnx_groups.compile_groups`)."""
    execution = getattr(args, "execution", "fused")
    for name in sorted({p for k in KERNELS.values() for p in (*k.params, *k.inputs)}):
        if getattr(args, name, None) is not None:
            raise CommandError(f"{args.target}: an ONNX model's shapes and inputs are its "
                               f"own (--{name.replace('_', '-')} is for kernels by name; "
                               f"inputs: --input NAME=FILE.npy)")
    files = _input_files(args)
    kernel = onnx_kernel(args.target, *_onnx_dims(args, files))
    arrays, sources = _onnx_arrays(kernel, files)
    if execution == "fused" and not needs_groups(kernel.imported.graph):
        try:
            return kernel, _compile(args, kernel, {}), arrays, sources
        except CompileError:
            pass                    # not one configuration: several (the groups' errors)
    if getattr(args, "dump_after", None) or getattr(args, "passes_selected", None) or \
            getattr(args, "passes_skipped", None):
        raise CommandError(f"{args.target}: --dump-after, --passes and --skip compile one "
                           f"configuration; this model is several (rdu inspect "
                           f"{args.target} lists them)")
    kernel, sequence = compile_groups(kernel, machine_for(args, kernel.machine),
                                      model=str(Path(args.target).resolve()),
                                      fuse_mlp=execution == "fused")
    return kernel, sequence, arrays, sources


def program_for(args):
    """The program of ``rdu run``/``compile``: compiled from the kernel's options (or an
    ONNX model) or read from a program file; the user's arrays (``--a``...) with it.
    What takes the compiler long is said on stderr (not with ``--json``)."""
    with reporting_progress(None if getattr(args, "json", False) else _say), \
            routing(getattr(args, "router", None) or "greedy"):
        return _program_for(args)


def _say(line):
    print(f"[rdu] {line}", file=sys.stderr, flush=True)


def _program_for(args):
    arrays, sources = {}, {}
    target = args.target
    if target.endswith(".onnx"):
        return _onnx_program(args)
    if target in KERNELS:
        kernel = get_kernel(target)
        _user_arrays(args, kernel, arrays, sources)
        params = kernel_params(args, kernel, arrays)
        if getattr(args, "execution", "fused") != "fused":
            kernel.graph(params)            # the kernel's own checks of its shape
            return kernel, compile_unfused(kernel.name, machine_for(args, kernel.machine),
                                           **params), arrays, sources
        return kernel, _compile(args, kernel, params), arrays, sources
    if getattr(args, "execution", "fused") != "fused":
        raise CommandError(f"{target}: a program file is one configuration; --execution "
                           f"{args.execution} compiles a kernel by name")
    if args.target.endswith(".bin"):
        raise CommandError(f"{target}: a bare bitstream carries no shapes or tensors; "
                           f"compile a program file with 'rdu compile ... -o FILE.rdu'")
    program = Program.read(target)
    if program.kernel == ONNX_KERNEL and "groups" in program.params:
        raise CommandError(f"{target} is configuration {program.params['group']} of "
                           f"{program.params['groups']} of {program.params['model']}: run "
                           f"the model (rdu run {Path(program.params['model']).name})")
    if program.kernel == ONNX_KERNEL:
        kernel = onnx_kernel(program.params["model"], program.params.get("dims"))
        arrays, sources = _onnx_arrays(kernel, _input_files(args))
    else:
        kernel = get_kernel(program.kernel)
    for name in (*kernel.params, *kernel.choices, *kernel.options):
        given = size_option(args, name) if name in kernel.params else getattr(args, name,
                                                                                None)
        if given is not None and given != program.params.get(name):
            raise CommandError(f"{target} was compiled for {name.upper()}="
                               f"{program.params.get(name)}, not {given} "
                               f"(--{name.replace('_', '-')})")
    overrides = machine_overrides(args)
    if overrides:
        wanted = program.machine.replace(**overrides)
        difference = program.machine.mismatch(wanted)
        if difference:
            raise CommandError(f"{target} was compiled for another machine: {difference}")
    if program.kernel != ONNX_KERNEL:
        _user_arrays(args, kernel, arrays, sources)
    return kernel, program, arrays, sources


# -- output ---------------------------------------------------------------------------------

def check_output(path, directory=False):
    """Fail now, before any work, if ``path`` cannot be written."""
    path = Path(path)
    target = path if directory else path.parent
    blocking = next((parent for parent in [target, *target.parents]
                     if parent.exists() and not parent.is_dir()), None)
    if blocking is not None:
        raise CommandError(f"cannot write {'directory' if directory else 'file'} {path}: "
                           f"{blocking} is a file, not a directory")
    try:
        target.mkdir(parents=True, exist_ok=True)
        probe = target / f".rdu-write-test-{id(path)}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as error:
        raise CommandError(f"cannot write {'directory' if directory else 'file'} {path}: "
                           f"{error.strerror or error}") from None
    if directory and path.exists() and not path.is_dir():
        raise CommandError(f"cannot write directory {path}: it is a file")
    if not directory and path.is_dir():
        raise CommandError(f"cannot write file {path}: it is a directory")


def print_report(report, as_json):
    """A command's report: one JSON object, or one aligned ``key  value`` line each."""
    if as_json:
        print(json.dumps(report))
        return
    width = max(len(key) for key in report)
    for key, value in report.items():
        print(f"{key:<{width}}  {value}")


# -- errors and exit status -----------------------------------------------------------------

def run_command(args):
    """Run the parsed command ``args.func(args)``; its exit status, an error as one line
    on stderr (2, or 1 for a wrong result, 130 when interrupted)."""
    try:
        return args.func(args)
    except (CommandError, RunFailure, ValueError, OSError, SweepError) as error:
        # MappingError, BitstreamError, ProgramError, MachineError and KernelInputError
        # are ValueErrors
        if isinstance(error, BrokenPipeError):
            return _closed_pipe()
        text = str(error).strip().splitlines()[0] if str(error).strip() else type(
            error).__name__
        print(f"rdu {args.command}: error: {text}", file=sys.stderr)
        return 2
    except WrongResult as error:
        print(f"rdu {args.command}: FAILED: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"rdu {args.command}: interrupted", file=sys.stderr)
        return 130


def _closed_pipe():
    """The reader went away (``rdu inspect FILE | head``): stop quietly."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except OSError:
        pass
    return 0
