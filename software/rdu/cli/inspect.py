"""``rdu inspect``: print a program's manifest and every unit's fields."""

import json
from pathlib import Path

from rdu.apps.onnx_groups import describe_stage
from rdu.apps.unfused import Sequence
from rdu.bitstream import from_bytes, read_bitstream
from rdu.cli.common import CommandError, add_command, program_for
from rdu.program import MAGIC, Program
from rdu.runtime import roofline
from rdu.units.registry import UNITS


def flatten(fields, prefix=""):
    """``{"a": {"b": [1, 2]}}`` -> ``[("a.b[0]", 1), ("a.b[1]", 2)]``."""
    if isinstance(fields, dict):
        items = []
        for name, value in fields.items():
            items += flatten(value, f"{prefix}.{name}" if prefix else name)
        return items
    if isinstance(fields, list):
        if all(isinstance(v, int) for v in fields):
            return [(prefix, fields)]
        items = []
        for index, value in enumerate(fields):
            items += flatten(value, f"{prefix}[{index}]")
        return items
    return [(prefix, fields)]


def is_zero(value):
    """Whether a field's value is the idle one (zero, or a mode's neutral name)."""
    if isinstance(value, list):
        return all(is_zero(v) for v in value)
    if isinstance(value, dict):
        return all(is_zero(v) for v in value.values())
    return value in (0, "NONE", "PASS", "PREV", "SIMD")


def cmd_inspect(args):
    """``rdu inspect``: a program file's manifest (or a bare bitstream's header) and
    every unit's configuration fields."""
    path = Path(args.file)
    if path.suffix == ".onnx":
        return inspect_model(args)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise CommandError(f"{path}: no such file") from None
    program = None
    if raw[:len(MAGIC)] == MAGIC:
        program = Program.from_bytes(raw, str(path))
        words = program.bitstream
        stages = program.machine.stages
    else:
        words = from_bytes(raw)
        stages = args.stages
    header, records = read_bitstream(words)
    geometry = header.geometry
    units = []
    for record in records:
        pieces = UNITS[record.kind]
        fields = pieces.decode(record.words, geometry.lanes, stages)
        units.append({"kind": record.kind.name, "row": record.row, "col": record.col,
                      "words": len(record.words),
                      "fields": fields if args.raw else pieces.named_fields(fields)})
    if args.json:
        print(json.dumps({"manifest": program.manifest() if program else None,
                          "roofline": roofline([program]).to_json() if program else None,
                          "header": {"rows": geometry.rows, "cols": geometry.cols,
                                     "lanes": geometry.lanes, "version": header.version,
                                     "payload_words": header.length, "crc": header.crc},
                          "units": units}))
        return 0
    if program:
        manifest = program.manifest()
        print(f"{path}: program {program.name!r}, kernel "
              f"{program.kernel} " + " ".join(f"{k.upper()}={v}"
                                             for k, v in program.params.items()))
        print(f"  machine: {program.machine.describe()}, AGCUs at "
              f"{', '.join(f'{side} of row {row}' for side, row in program.machine.positions())}"
              f", HBM {program.machine.hbm_bytes >> 20} MiB, DDR "
              f"{program.machine.ddr_bytes >> 20} MiB")
        if "groups" in program.params:
            print(f"  configuration {program.params['group']} of "
                  f"{program.params['groups']} of the model: {program.meta['group']} family")
        print(f"  roofline: {roofline([program]).describe()}")
        print(f"  bitstream at {program.bitstream_address:#x} ({len(words)} words), "
              f"EXECUTE on AGCU {', '.join(map(str, program.execute))}")
        for name, tensor in manifest["tensors"].items():
            print(f"  {tensor['role']:<6} {name}: {tensor['dtype']} "
                  f"{'x'.join(map(str, tensor['shape']))} at {tensor['address']:#x} "
                  f"({tensor['words']} words), {tensor['layout']}")
    print(f"{path}: bitstream v{header.version}, array {geometry.rows}x{geometry.cols} "
          f"lanes={geometry.lanes}, {header.length} payload words, CRC {header.crc:#010x} ok, "
          f"{len(records)} records" + ("" if program else f" (PCU fields decoded with "
                                                          f"{stages} stages: --stages)"))
    for unit in units:
        where = (f"AGCU {unit['col']}" if unit["kind"] == "AGCU"
                 else f"{unit['kind']}({unit['row']},{unit['col']})")
        values = [(name, value) for name, value in flatten(unit["fields"])
                  if args.all or not is_zero(value)]
        print(f"{where}: {unit['words']} words" + ("" if values else ", all zero (idle)"))
        for name, value in values:
            print(f"    {name} = {value}")
    return 0


def inspect_model(args):
    """``rdu inspect MODEL.onnx``: the configurations the model compiles into on the
    default machine, what each one is, reads and writes."""
    args.target, args.execution = args.file, "fused"
    kernel, program, _, _ = program_for(args)
    stages = program.stages if isinstance(program, Sequence) else []
    report = {"kernel": kernel.describe(None), "machine": program.machine.describe(),
              "configurations": len(stages) or 1}
    if stages:
        for index, stage in enumerate(stages, 1):
            report[f"configuration {index}"] = f"{stage.name}: {describe_stage(stage)}"
    else:
        report["configuration 1"] = (f"{program.name}: {program.meta['group']}, "
                                     f"{program.meta.get('pcus')} PCUs (one fused "
                                     f"configuration)")
    if args.json:
        print(json.dumps(report))
    else:
        width = max(len(key) for key in report)
        for key, value in report.items():
            print(f"{key:<{width}}  {value}")
    return 0


def add_parsers(commands):
    """``rdu inspect`` on the subparsers object ``commands``."""
    inspect = add_command(commands, "inspect",
                          "print a program's manifest and every unit's fields")
    inspect.add_argument("file", help="a program file (.rdu), a bare bitstream, or an "
                                      "ONNX model (its configurations on the default "
                                      "machine)")
    inspect.add_argument("--stages", type=int, default=4,
                         help="PCU SIMD stages, for a bare bitstream (a program file "
                              "records them)")
    inspect.add_argument("--all", action="store_true", help="also print zero fields")
    inspect.add_argument("--bind", action="append", metavar="NAME=VALUE",
                         help="a dynamic dimension of an ONNX model and its value "
                              "(repeatable: docs/onnx.md, 'A KV cache')")
    inspect.add_argument("--raw", action="store_true",
                         help="codes as numbers (default: routes, modes and ops by name)")
    inspect.add_argument("--json", action="store_true", help="print everything as JSON")
    inspect.set_defaults(func=cmd_inspect)
