"""Where each operator of an ONNX model runs, what it costs and how far it is from
onnxruntime (``docs/onnx.md``, "Operator by operator").

A model of several configurations (:func:`rdu.apps.onnx_groups.compile_groups`) records
at each stage the front-end values the stage completes (:attr:`rdu.apps.unfused.Stage.observes`:
a normalised input, Q, K and V after rotary, attention's output, ``o_proj``, the
residual, every value after attention, each group's sink). :func:`operator_table` gives
one row per such value, in the order of the sequence:

* the ONNX node that computes it (the front-end node's origin) and its op type;
* the configurations that run for it: those after the previous row's up to its own
  (the squares and sums of a norm go with the norm, the products of a rotary with it);
* their units (:func:`rdu.apps.onnx_groups.describe_stage`'s family, shape and PCUs),
  and their load and execution cycles when the run was timed;
* the error of the machine's words of that value (the hardware's arithmetic stage by
  stage, :meth:`rdu.apps.unfused.Sequence.exact`, the words the RTL is checked to
  produce) against onnxruntime's value of the node's output on the same inputs and
  rounded weights: the largest absolute difference, and its share of onnxruntime's
  largest magnitude there.
"""

import numpy as np

from ..onnx.kernel import onnxruntime_values
from ..onnx.values import core_shape
from .onnx_groups import describe_stage, onnx_origin

__all__ = ["operator_table", "markdown"]


def _origin(node):
    """The node whose ONNX node computed ``node``'s value (a BF16 cast's operand)."""
    return node.inputs[0] if node.op == "unary" and node.attrs.get("fn") == "cast" else node


def _observed(sequence):
    """``[(stage index, node, function)]`` in the sequence's order, one per ONNX node
    (an FP32 value before its BF16 cast when both are observed)."""
    chosen = {}
    for index, stage in enumerate(sequence.stages):
        for node, function in stage.observes:
            cast = _origin(node) is not node
            name, _ = onnx_origin(_origin(node))
            if name is None:
                continue
            if name not in chosen or (chosen[name][3] and not cast):
                chosen[name] = (index, node, function, cast)
    return sorted((value[:3] for value in chosen.values()), key=lambda value: value[0])


def operator_table(kernel, sequence, inputs, figures=None):
    """The rows of the module docstring: ``[{operator, op, configurations (1-based),
    units, load_cycles, execute_cycles, max_abs_err, share}]``; ``kernel`` the
    :class:`rdu.onnx.OnnxKernel` of ``sequence``, ``inputs`` the run's words,
    ``figures`` :func:`rdu.runtime.run_sequence`'s (cycles; None: untimed)."""
    imported = kernel.imported
    _, produced = sequence.exact(inputs)
    observed = _observed(sequence)
    by_name = {node.name: node for node in imported.model.graph.node}
    tensors = {}
    for _, node, _ in observed:
        name, _ = onnx_origin(_origin(node))
        if name in by_name and by_name[name].output:
            tensors[name] = by_name[name].output[0]
    theirs = onnxruntime_values(imported, inputs, list(dict.fromkeys(tensors.values())))
    timed = [] if figures is None else figures.get("stages") or []
    rows, previous = [], -1
    for index, node, function in observed:
        name, op = onnx_origin(_origin(node))
        span = range(previous + 1, index + 1)
        previous = index
        row = {"operator": name, "op": op, "configurations": [i + 1 for i in span],
               "units": [describe_stage(sequence.stages[i]).split(":")[0] for i in span],
               "load_cycles": None, "execute_cycles": None, "max_abs_err": None,
               "share": None}
        if timed and timed[index].get("execute_cycles") is not None:
            row["load_cycles"] = sum(timed[i]["load_cycles"] for i in span)
            row["execute_cycles"] = sum(timed[i]["execute_cycles"] for i in span)
        reference = theirs.get(tensors.get(name))
        ours = np.asarray(function(produced), np.uint32).view(np.float32)
        if reference is not None and core_shape(reference.shape) == core_shape(ours.shape):
            error = float(np.abs(ours.astype(np.float64) - reference.reshape(
                ours.shape)).max())
            largest = float(np.abs(reference).max())
            row.update(max_abs_err=error, share=error / largest if largest else None)
        rows.append(row)
    return rows


def markdown(rows):
    """The rows as a Markdown table."""
    lines = ["| operator (ONNX node) | op | configurations | units | cycles (load + "
             "execute) | max abs error | share of the largest |", "|---|---|---|---|---|---|---|"]
    for row in rows:
        first, last = row["configurations"][0], row["configurations"][-1]
        span = f"{first}" if first == last else f"{first}-{last}"
        cycles = ("-" if row["execute_cycles"] is None else
                  f"{row['load_cycles'] + row['execute_cycles']:,} ({row['load_cycles']:,} + "
                  f"{row['execute_cycles']:,})")
        error = "-" if row["max_abs_err"] is None else f"{row['max_abs_err']:.3g}"
        share = "-" if row["share"] is None else f"{100 * row['share']:.2f}%"
        lines.append(f"| {row['operator']} | {row['op']} | {span} | "
                     f"{'; '.join(row['units'])} | {cycles} | {error} | {share} |")
    return "\n".join(lines)
