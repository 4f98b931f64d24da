"""An ONNX model as several configurations (``docs/onnx.md``, "Several configurations"):
the imported graph cut into groups that each map to a kernel family, the intermediates
through HBM, run one configuration after another as a :class:`rdu.apps.unfused.Sequence`
(the runtime's :func:`rdu.runtime.run_sequence`, on every back end that runs schedules).

The cut (:func:`partition`):

* every ``matmul`` (with a bias add folded, the matmul family's ``bias`` rule) is a
  group of its own (matmul family); its FP32 result is written row-major when a row
  group reads it;
* the other operators form row groups (rows family): a row group ends at a value that
  is a graph output, an operand of a matmul, or rows read by two groups (a per-row
  scalar two groups read is computed in both); the rest of its
  operators are those it alone depends on back to graph inputs, constants and other
  groups' values (its row operands: ``x + y``, ``silu(g) * u``);
* an operand of a matmul that is computed (not a graph input) is rounded to BF16 (a
  cast is inserted in the graph: the float64 budget counts it), and the row group that
  computes it writes its BF16 rows in the matmul's A tiling.

Compile order: the matmuls first (each fixes the A image its producer writes and the
FP32 image its readers read), then the row groups in graph order (each reads and writes
at the addresses and in the geometries fixed before it). Every program has HBM pages of
its own (:class:`~rdu.compiler.core.ImagePlan` ``start``), so the whole sequence sits in
memory at once.
"""

import dataclasses
import re

from ..compiler import compile_graph
from ..compiler.core import CompileError, ImagePlan
from ..layout import Image
from ..onnx import KERNEL_NAME
from ..onnx.kernel import prepared_graph
from .onnx_attention import (
    attention_members,
    attention_reads,
    compile_attention,
    operand_outputs,
    tail_of,
)
from .onnx_decode import compile_decode_attention
from .onnx_transposed import compile_transposed
from .unfused import Sequence, Stage, end_of

__all__ = ["Group", "partition", "onnx_origin", "compile_groups", "needs_groups", "mlp_candidates",
           "merged",
           "describe_stage"]


@dataclasses.dataclass(eq=False)
class Group:
    """One configuration of the cut: ``sink`` the node it outputs, ``family`` its
    family's name (``matmul`` or ``rows``), ``sources`` the other groups' values it
    reads (nodes)."""
    sink: object
    family: str
    sources: list


def onnx_origin(node):
    """``(name, op type)`` of the ONNX node in a front-end node's ``where`` (``label: node
    NAME (Op)``), or ``(None, None)``."""
    found = re.search(r": node (.+) \((\w+)\)$", node.where or "")
    return (found.group(1), found.group(2)) if found else (None, None)


def _is_row_op(node):
    return node.op not in ("input", "const", "matmul", "attention", "heads")


def _extract(graph, name, sources, outputs):
    """:meth:`Graph.extract`, its inputs keeping where they come from (the model's
    input, or the node whose value a source is) for the compiler's errors."""
    part = graph.extract(name, sources, outputs)
    origin = {source_name: source.where for source, source_name in sources.items()}
    for input_name, node in part.inputs.items():
        where = origin.get(input_name) or getattr(graph.inputs.get(input_name), "where", "")
        node.where = where or node.where
    return part


def _bias_add(users, matmul):
    """The add that folds a bias into ``matmul`` (its only user), or None. Not when A
    is computed: the fold appends a column of ones to A (K + 1, padded to a beat), which
    the row group writing A would have to write; the add is then a row group's."""
    mine = users.get(id(matmul), [])
    if matmul.inputs[0].op != "input":
        return None
    if len(mine) != 1 or mine[0].op != "binary" or mine[0].attrs["fn"] != "add":
        return None
    add = mine[0]
    other = add.inputs[1] if add.inputs[0] is matmul else add.inputs[0]
    n = matmul.shape[1]
    if other.op == "input" and other.dtype == "bf16" and other.shape in ((n,), (1, n)):
        return add
    return None


def partition(graph):
    """The :class:`Group` s of ``graph`` in graph order (module docstring)."""
    live = graph.live_nodes()
    users = {}
    for node in live:
        for parent in node.inputs:
            users.setdefault(id(parent), []).append(node)
    outputs = {id(node) for node in graph.outputs.values()}
    cores, inside = {}, set()           # matmul group sink -> matmul; nodes in them
    attentions = {}                     # attention -> its group's sink (the tail's end)
    reads = {}                          # attention -> the computed values it reads
    for node in live:
        if node.op == "attention":
            inside.update(attention_members(node, users, outputs))
            attentions[id(node)] = ([node] + tail_of(node, users, outputs))[-1]
            reads[id(node)] = attention_reads(node, users, outputs)
    read = {id(value) for values in reads.values() for value in values}
    for node in live:
        if node.op == "matmul" and id(node) not in inside:
            b = node.inputs[1]
            if b.op != "input":
                raise CompileError(f"{node.where}: its second operand is computed ("
                                   f"{b.op} {b.attrs.get('fn', '')}); supported: "
                                   f"weights and model inputs as a matrix product's B")
            add = _bias_add(users, node)
            sink = add if add is not None and id(node) not in outputs else node
            cores[id(sink)] = node
            inside.update({id(node), id(sink)})
    cut = {id(node) for node in live if _is_row_op(node) and id(node) not in inside and (
        id(node) in outputs or id(node) in read or
        any(user.op == "matmul" for user in users.get(id(node), ())))}
    rows_of = {id(node): len(node.shape) == 2 and node.shape[1] > 1 for node in live}
    while True:                         # a row value two groups read is cut too
        owners = {}
        for node in live:
            if id(node) in cut:
                for parent in _members(node, cut, inside)[1:]:
                    owners.setdefault(id(parent), set()).add(id(node))
        # a per-row scalar two groups read is computed in each (a group writes rows)
        shared = {key for key, sinks in owners.items()
                  if len(sinks) > 1 and rows_of[key]}
        if not shared:
            break
        cut |= shared
    att_sinks = {id(sink) for sink in attentions.values()}
    groups = []
    for node in live:
        if id(node) in attentions:
            groups.append(Group(attentions[id(node)], "attention", reads[id(node)]))
        elif id(node) in cores:
            matmul = cores[id(node)]
            sources = [i for i in matmul.inputs if i.op not in ("input", "const")]
            groups.append(Group(node, "matmul", sources))
        elif id(node) in cut:
            members = _members(node, cut, inside)
            seen, sources = set(), []
            for member in members:
                for parent in member.inputs:
                    if (id(parent) in cut or id(parent) in cores or
                            id(parent) in att_sinks) and \
                            parent is not node and id(parent) not in seen:
                        seen.add(id(parent))
                        sources.append(parent)
            groups.append(Group(node, "rows", sources))
    return groups


def mlp_candidates(graph, groups):
    """``(down, rows, firsts)`` group indices the mlp family may fuse into one group:
    a matmul whose A is the value of a row group read by it alone, that row group
    reading only one or two matmuls of one A (gated), each read by it alone, none of
    them a model output."""
    by_sink = {id(group.sink): index for index, group in enumerate(groups)}
    readers, outputs = {}, {id(node) for node in graph.outputs.values()}
    for index, group in enumerate(groups):
        for source in group.sources:
            readers.setdefault(id(source), []).append(index)

    def only(index, reader):
        sink = groups[index].sink
        return readers.get(id(sink)) == [reader] and id(sink) not in outputs

    for down, group in enumerate(groups):
        if group.family != "matmul" or group.sink.op != "matmul" or len(group.sources) != 1:
            continue
        rows = by_sink.get(id(group.sources[0]))
        if rows is None or groups[rows].family != "rows" or not only(rows, down):
            continue
        firsts = [by_sink.get(id(source)) for source in groups[rows].sources]
        if not 1 <= len(firsts) <= 2 or None in firsts or any(
                groups[f].family != "matmul" or groups[f].sink.op != "matmul" or
                not only(f, rows) for f in firsts):
            continue
        if len({id(groups[f].sink.inputs[0]) for f in firsts}) == 1:
            yield down, rows, firsts


def merged(groups, down, rows, firsts):
    """``groups`` with the mlp candidate ``(down, rows, firsts)`` as one mlp group (at
    ``down``'s place), reading what the first products read."""
    first = groups[firsts[0]]
    group = Group(groups[down].sink, "mlp", list(first.sources))
    gone = {rows, *firsts}
    return [group if index == down else other for index, other in enumerate(groups)
            if index not in gone]


def _members(sink, cut, inside):
    """``sink`` and the row operators only it depends on (up to inputs, constants, cut
    values and matmul groups)."""
    members, stack, seen = [sink], list(sink.inputs), {id(sink)}
    while stack:
        node = stack.pop()
        if id(node) in seen or not _is_row_op(node) or id(node) in cut or \
                id(node) in inside:
            continue
        seen.add(id(node))
        members.append(node)
        stack.extend(node.inputs)
    return members


def needs_groups(graph):
    """Whether ``graph`` is more than one configuration for sure: several outputs."""
    return len(graph.outputs) > 1


def _names(graph, groups):
    """``{id(node): tensor name}`` of every group's value: its graph output name, else
    ``t<i>`` (a name no input or output has)."""
    names = {id(node): name for name, node in reversed(graph.outputs.items())}
    taken = set(graph.inputs) | set(graph.outputs)
    for index, group in enumerate(groups):
        if id(group.sink) not in names:
            name = f"t{index}"
            while name in taken:
                name += "_"
            taken.add(name)
            names[id(group.sink)] = name
    return names


def _stage_name(graph, group, index):
    onnx_name = onnx_origin(group.sink)[0] or group.family
    text = re.sub(r"\W+", "_", onnx_name).strip("_") or group.family
    return f"{graph.name}_{index}_{text}"


def _fixed_plan(start, stage_graph, fixed, own_out=None):
    """An :class:`ImagePlan` from ``start`` with the addresses and layouts ``fixed``
    ``{name: (address or None, Image)}`` has for the stage's tensors."""
    addresses, layouts = {}, {}
    for name in (*stage_graph.inputs, *stage_graph.outputs):
        if name in fixed:
            address, image = fixed[name]
            if address is not None:
                addresses[name] = address
            layouts[name] = image
    if own_out is not None:
        layouts.setdefault(own_out[0], own_out[1])
    return ImagePlan(start=start, addresses=addresses, layouts=layouts)


def compile_groups(kernel, machine, model="", fuse_mlp=True, decode=None):
    """The :class:`Sequence` of the ONNX kernel ``kernel`` (:class:`rdu.onnx.OnnxKernel`)
    on ``machine``, and the kernel whose graph has the inserted casts (the one whose
    budget checks the run): ``(kernel, sequence)``. ``fuse_mlp``: the products and the
    row group of an MLP (:func:`mlp_candidates`) as one mlp group where the mlp family
    compiles them for ``machine`` (SwiGLU as one gated mlp configuration). ``decode``: a
    :class:`rdu.apps.onnx_decode.DecodePlan`, each attention compiled as a decode step's
    (its K and V in a KV cache)."""
    graph = prepared_graph(kernel.imported.graph)       # done by onnx_kernel already
    kernel = dataclasses.replace(kernel, imported=dataclasses.replace(kernel.imported,
                                                                      graph=graph))
    groups = partition(graph)
    later = _after_attention(groups)
    attentions = [group for group in groups if group.family == "attention"]
    groups = [group for group in groups if group.family != "attention" and
              not any(group in after for after in later.values())]
    if fuse_mlp:
        groups = _fused_mlps(graph, groups, machine)
    names = _names(graph, groups)
    row_readers = {id(source) for group in groups if group.family == "rows"
                   for source in group.sources}
    graphs = {}
    for index, group in enumerate(groups):
        sources = {source: names[id(source)] for source in group.sources}
        graphs[index] = _extract(graph, _stage_name(graph, group, index), sources,
                                 {names[id(group.sink)]: group.sink})
    fixed, programs, start = {}, {}, None
    order = sorted(range(len(groups)), key=lambda i: groups[i].family != "matmul")
    for index in order:
        group, stage_graph = groups[index], graphs[index]
        out = names[id(group.sink)]
        row_major = None
        if group.family == "matmul" and id(group.sink) in row_readers:
            row_major = (out, Image(group.sink.shape, (), None, None, "fp32"))
        params = {"model": model, "group": index + 1, "groups": len(groups)}
        program = compile_graph(stage_graph, machine, kernel=KERNEL_NAME, params=params,
                                plan=_fixed_plan(start, stage_graph, fixed, row_major))
        _check_family(program, group, stage_graph)
        start = end_of(program)
        programs[index] = program
        images = program.meta["images"]
        for name in (*stage_graph.inputs, out):
            if name in fixed or name not in images or \
                    (name in stage_graph.inputs and name in graph.inputs):
                continue
            image = Image.from_json(images[name])
            if group.family != "rows" and name != out:
                _check_a_width(group, stage_graph, name, image)
            fixed[name] = (images[name]["address"], image)
    stages = []
    producer = {names[id(group.sink)]: index for index, group in enumerate(groups)}
    for index in range(len(groups)):
        stage_graph = graphs[index]
        user = {name: (lambda inputs, name=name: inputs[name])
                for name in stage_graph.inputs if name not in producer}
        produced = {name: (producer[name], name) for name in stage_graph.inputs
                    if name in producer}
        out = names[id(groups[index].sink)]
        stages.append(Stage(stage_graph.name, stage_graph, programs[index], user, produced,
                            [(groups[index].sink, lambda words, index=index, out=out:
                              words[index][out])]))
    transforms, values = {}, {}         # values: what the cuts keep transposed
    for group in attentions:            # its projections, then the attention
        name = next((n for n, node in graph.outputs.items() if node is group.sink), None)
        if decode is None:
            more, transform = compile_attention(graph, group.sink, machine, start, name,
                                                len(stages), {"model": model}, values)
        else:
            more, transform = compile_decode_attention(graph, group.sink, machine, start,
                                                       name, len(stages), {"model": model},
                                                       values, decode)
        start = max(end_of(stage.program) for stage in more)
        stages += more
        if name is not None:
            transforms[name] = transform
            producer[name] = len(stages) - 1
            names[id(group.sink)] = name
            continue
        more, after, producers = compile_transposed(
            graph, later[id(group)], group.sink, len(stages) - 1,
            stages[-1].program.meta["images"]["h"]["address"], machine, {"model": model},
            start, len(stages), group.sink.shape[0], values)
        stages += more
        start = max(end_of(stage.program) for stage in stages)
        transforms.update(after)
        producer.update(producers)
        names.update({id(graph.outputs[out]): out for out in producers})
    for index, stage in enumerate(stages):  # with attention's, the count is the sequence's
        stage.program.params.update(group=index + 1, groups=len(stages))
    held = operand_outputs(graph, stages)      # K, V of attention: present (a cache)
    where = {name: producer[names[id(node)]] for name, node in graph.outputs.items()
             if name not in held}

    def assemble(results):
        out = {name: held[name](results) if name in held else
               results[where[name]][names[id(graph.outputs[name])]]
               for name in graph.outputs}
        return {name: transforms[name](words) if transforms.get(name) else words
                for name, words in out.items()}

    return kernel, Sequence(KERNEL_NAME, {}, stages, assemble)


def _after_attention(groups):
    """``{id(attention group): [groups]}``: the groups that read an attention's result
    (its residual, read by more of the model: :mod:`rdu.apps.onnx_transposed`),
    directly or through others, each with the last attention before it in graph
    order (a decoder's layers: each layer's rest after its attention)."""
    reached, later, current = set(), {}, None
    for group in groups:                # graph order
        if group.family == "attention":
            current = group
            later[id(group)] = []
            reached.add(id(group.sink))
        elif current is not None and any(id(source) in reached
                                         for source in group.sources):
            later[id(current)].append(group)
            reached.add(id(group.sink))
    return later


def _fused_mlps(graph, groups, machine):
    """``groups`` with every :func:`mlp_candidates` the mlp family compiles for
    ``machine`` as one group (SwiGLU: gate, up, ``silu(g) * u``, down in one)."""
    while True:
        for down, rows, firsts in mlp_candidates(graph, groups):
            trial = merged(groups, down, rows, firsts)
            group = trial[down - sum(index < down for index in (rows, *firsts))]
            sources = {source: f"s{index}" for index, source in enumerate(group.sources)}
            try:
                program = compile_graph(_extract(graph, f"{graph.name}_mlp", sources,
                                                 {"y": group.sink}), machine)
            except CompileError:
                continue
            if program.meta["group"] == "mlp":
                groups = trial
                break
        else:
            return groups


def _check_family(program, group, stage_graph):
    if program.meta["group"] != group.family:
        raise CompileError(f"{group.sink.where}: group {stage_graph.name} compiled as "
                           f"{program.meta['group']}, expected {group.family}")


def _check_a_width(group, stage_graph, name, image):
    """A matmul's computed operand is written by a row group: whole rows, no padding of
    K for it to write."""
    node = stage_graph.inputs[name]
    if image.shape[1] != node.shape[1]:
        raise CompileError(f"{group.sink.where}: the matmul pads its K "
                           f"{node.shape[1]} to {image.shape[1]} (a folded bias, or K not "
                           f"a multiple of a BF16 beat); the row group before it would "
                           f"have to write the padding")


def describe_stage(stage):
    """One line: the configuration's family, shape, PCUs, what it reads and writes."""
    program, graph = stage.program, stage.graph
    meta = program.meta
    family = meta["group"]
    if family == "matmul":
        shape = f"{meta['m']}x{meta['k']} @ {meta['k']}x{meta['n']}"
    elif family == "mlp":
        gated = len(meta["operands"]) > 3
        shape = (f"{'gated ' if gated else ''}{meta['m']}x{meta['d']} -> {meta['f']} -> "
                 f"{meta['d']}")
    elif family == "rows":
        shape = f"{meta['rows']} rows of {meta['length']}"
    else:
        shape = program.name
    reads = ", ".join(f"{name} (configuration {stage.produced[name][0] + 1})"
                      if name in stage.produced else name for name in graph.inputs)
    writes = ", ".join(graph.outputs)
    return f"{family} {shape}, {meta.get('pcus')} PCUs: {reads} -> {writes}"
