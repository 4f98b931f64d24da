"""A tiny Llama-architecture model written by the project (``docs/onnx.md``, "A tiny
Llama"): seeded random weights, any number of layers, hidden size, heads, key/value
heads, FFN width, vocabulary and sequence length, written with ``onnx.helper`` in the
operator form the PyTorch exporter gives ``LlamaForCausalLM`` with eager attention at
opset 18 (batch 1, static shapes)::

    python -m rdu.onnx.tiny_llama --layers 1 --hidden 64 --heads 2 --kv-heads 1 \\
        --ffn 128 --vocab 0 --seq 16 -o build/tiny_llama.onnx

The nodes, in order (``L`` the sequence, ``H`` heads of ``D = hidden / H``, ``G``
key/value heads):

* the embedding: ``Gather(embed_tokens.weight, input_ids)`` (``--embedding gather``:
  the importer makes it a lookup on the host, :mod:`rdu.onnx.lookup`, and ``rdu run``
  writes the rows of the ids), or the model reads the rows ``inputs_embeds`` (1, L,
  hidden) the host looked up (``--embedding host``, the default); either way the
  machine does not run a ``Gather`` of a table by token ids (the host's lookup is a
  copy of L rows);
* position ids and the rotary tables, once: ``Shape``, ``Gather``, ``Range``, ``Cast``,
  ``Unsqueeze``, ``MatMul`` by ``inv_freq``, ``Concat``, ``Cos``, ``Sin``,
  ``Unsqueeze`` to (1, 1, L, D); the causal mask's ``keep``: ``Range``,
  ``Unsqueeze``, ``LessOrEqual``;
* per layer ``i`` (names ``layers.i.*``): RMSNorm (``Pow``, ``ReduceMean``, ``Add`` of
  epsilon, ``Sqrt``, ``Reciprocal``, ``Mul``, ``Mul`` by the weight); q, k, v
  ``MatMul`` by the transposed ``nn.Linear`` weights, ``Reshape`` to (1, L, heads, D),
  ``Transpose`` (0, 2, 1, 3); rotary of q and k (``Slice``, ``Slice``, ``Neg``,
  ``Concat``, ``Mul`` by cos, ``Mul`` by sin, ``Add``; ``--rotation half`` is HF's
  ``rotate_half``, ``cat(-x2, x1)``; ``reversed`` is ``cat(x2, -x1)``, the other
  direction, a rotation the importer does not recognise as rotate_half); with ``G < H`` HF's
  ``repeat_kv`` of k and v (``Unsqueeze`` axis 2, ``Expand``, ``Reshape``); the scores
  ``MatMul(q, Transpose(k, (0, 1, 3, 2)))``, ``Mul`` by ``D^-0.5``, ``Where(keep,
  scores, -inf)``, ``Softmax``, ``MatMul`` by v; ``Transpose`` (0, 2, 1, 3),
  ``Reshape`` to (1, L, hidden), ``MatMul`` by o_proj, ``Add`` (the residual); RMSNorm,
  gate and up ``MatMul``, ``Sigmoid``, ``Mul`` (SiLU), ``Mul``, down ``MatMul``,
  ``Add``;
* the final RMSNorm (``norm``) and, with a vocabulary, the LM head ``MatMul`` by
  ``lm_head.weight`` transposed: the logits (1, L, vocab); without, the final hidden
  states.

Weights: q, k, v of N(0, 0.3^2), o_proj of N(0, 1), gate, up, down of N(0, 1/fan-in),
the norms' weights 1 + N(0, 0.25^2), the embedding and the LM head of N(0, 1/hidden).
"""

import argparse
import sys

import numpy as np

__all__ = ["tiny_llama", "main", "Config"]


class Config:
    """The shape of a tiny Llama; :meth:`check` refuses an inconsistent one in one
    line."""

    FIELDS = (("layers", 1), ("hidden", 64), ("heads", 2), ("kv_heads", 0), ("ffn", 128),
              ("vocab", 0), ("seq", 16), ("seed", 0), ("embedding", "host"),
              ("eps", 1e-6), ("theta", 10000.0), ("kv_cache", False), ("rotation", "half"))

    def __init__(self, **values):
        unknown = set(values) - {name for name, _ in self.FIELDS}
        if unknown:
            raise ValueError(f"tiny_llama: unknown parameter {sorted(unknown)[0]}")
        for name, default in self.FIELDS:
            setattr(self, name, values.get(name, default))
        self.kv_heads = self.kv_heads or self.heads
        self.check()

    def check(self):
        for name in ("layers", "hidden", "heads", "kv_heads", "ffn", "seq"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"tiny_llama: --{name.replace('_', '-')} "
                                 f"{getattr(self, name)} must be at least 1")
        if self.vocab < 0:
            raise ValueError(f"tiny_llama: --vocab {self.vocab} must be 0 (no LM head) or "
                             f"more")
        if self.hidden % self.heads:
            raise ValueError(f"tiny_llama: --hidden {self.hidden} is not a multiple of "
                             f"--heads {self.heads}")
        if (self.hidden // self.heads) % 2:
            raise ValueError(f"tiny_llama: head dimension {self.hidden // self.heads} is "
                             f"odd; rotary needs an even one")
        if self.heads % self.kv_heads:
            raise ValueError(f"tiny_llama: --heads {self.heads} is not a multiple of "
                             f"--kv-heads {self.kv_heads}")
        if self.embedding not in ("host", "gather"):
            raise ValueError(f"tiny_llama: --embedding {self.embedding}: host or gather")
        if self.rotation not in ("half", "reversed"):
            raise ValueError(f"tiny_llama: --rotation {self.rotation}: half or reversed")
        if self.embedding == "gather" and not self.vocab:
            raise ValueError("tiny_llama: --embedding gather needs a --vocab")

    @property
    def dim(self):
        return self.hidden // self.heads


class _Writer:
    """Nodes and initializers, named as the exporter names them."""

    def __init__(self, config):
        from onnx import helper, numpy_helper
        self.helper, self.numpy_helper = helper, numpy_helper
        self.c, self.nodes, self.inits = config, [], []
        self.rng = np.random.default_rng(config.seed)

    def node(self, op, inputs, output, name, **attrs):
        self.nodes.append(self.helper.make_node(op, inputs, [output], name=name, **attrs))
        return output

    def const(self, name, value, dtype=np.int64):
        self.inits.append(self.numpy_helper.from_array(np.asarray(value, dtype), name))
        return name

    def weight(self, name, shape, scale):
        values = self.rng.standard_normal(shape) * scale
        return self.const(name, values, np.float32)

    def rms_norm(self, source, prefix):
        c = self.c
        weight = self.const(f"{prefix}.weight", 1 + 0.25 * self.rng.standard_normal(
            c.hidden), np.float32)
        two = self.const(f"{prefix}.two", 2.0, np.float32)
        axes = self.const(f"{prefix}.axes", [-1])
        eps = self.const(f"{prefix}.eps", c.eps, np.float32)
        sq = self.node("Pow", [source, two], f"{prefix}.sq", f"{prefix}/Pow")
        var = self.node("ReduceMean", [sq, axes], f"{prefix}.var", f"{prefix}/ReduceMean",
                        keepdims=1)
        ve = self.node("Add", [var, eps], f"{prefix}.ve", f"{prefix}/Add")
        sd = self.node("Sqrt", [ve], f"{prefix}.sd", f"{prefix}/Sqrt")
        r = self.node("Reciprocal", [sd], f"{prefix}.r", f"{prefix}/Reciprocal")
        xr = self.node("Mul", [source, r], f"{prefix}.xr", f"{prefix}/Mul")
        return self.node("Mul", [weight, xr], f"{prefix}.out", f"{prefix}/Mul_1")

    def shared_cache(self):
        """With ``--kv-cache``: the rotary tables (1, 1, L, D) from ``position_ids``
        (1, L) times ``inv_freq``, and the causal mask's ``keep`` (1, L, P + L) with the
        past's offset (key ``j`` visible to the query at position ``p`` when ``j <=
        p``) and the attention mask's padding, from ``Shape``, ``Range`` and
        comparisons as the exporters write them."""
        self.inv_freq()
        one, zero = self.const("c_one", 1), self.const("c_zero", 0)
        axis1, axis2 = self.const("c_axis1", [1]), self.const("c_axis2", [2])
        axis0 = self.const("c_axis0", [0])
        col = self.node("Unsqueeze", ["position_ids", axis2], "position_col",
                        "rotary/Unsqueeze")
        posf = self.node("Cast", [col], "position_f", "rotary/Cast", to=1)
        self.rotary_tables(posf, axis1)
        shape = self.node("Shape", ["attention_mask"], "mask_shape", "mask/Shape")
        total = self.node("Gather", [shape, one], "total_len", "mask/Gather", axis=0)
        keys = self.node("Range", [zero, total, one], "key_positions", "mask/Range")
        keys = self.node("Unsqueeze", [keys, axis0], "mask_keys", "mask/Unsqueeze")
        queries = self.node("Unsqueeze", ["position_ids", axis2], "mask_queries",
                            "mask/Unsqueeze_1")
        causal = self.node("LessOrEqual", [keys, queries], "causal", "mask/LessOrEqual")
        padding = self.node("Cast", ["attention_mask"], "padding", "mask/Cast", to=9)
        padding = self.node("Unsqueeze", [padding, axis1], "padding_rows",
                            "mask/Unsqueeze_2")
        self.node("And", [causal, padding], "keep", "mask/And")
        self.rotate_half_constants()

    def shared(self, source):
        """Position ids, the rotary tables ``cos``, ``sin`` (1, 1, L, D) and the causal
        mask's ``keep`` (L, L), from the shape of ``source``."""
        self.inv_freq()
        one, zero = self.const("c_one", 1), self.const("c_zero", 0)
        axis0, axis1 = self.const("c_axis0", [0]), self.const("c_axis1", [1])
        axes01 = self.const("c_axes01", [0, 1])
        shape = self.node("Shape", [source], "shape", "rotary/Shape")
        n = self.node("Gather", [shape, one], "seq_len", "rotary/Gather", axis=0)
        pos = self.node("Range", [zero, n, one], "position_ids", "rotary/Range")
        posf = self.node("Cast", [pos], "position_f", "rotary/Cast", to=1)
        col = self.node("Unsqueeze", [posf, axis1], "position_col", "rotary/Unsqueeze")
        self.rotary_tables(col, axes01)
        cols = self.node("Unsqueeze", [pos, axis1], "mask_cols", "mask/Unsqueeze")
        rows = self.node("Unsqueeze", [pos, axis0], "mask_rows", "mask/Unsqueeze_1")
        self.node("LessOrEqual", [rows, cols], "keep", "mask/LessOrEqual")
        self.rotate_half_constants()

    def inv_freq(self):
        """The initializer ``inv_freq`` (1, D / 2): ``theta ** -(2i / D)``."""
        dim = self.c.dim
        inverse = 1.0 / self.c.theta ** (np.arange(0, dim, 2) / dim)
        self.const("inv_freq", inverse.reshape(1, dim // 2), np.float32)

    def rotary_tables(self, positions, axes):
        """``cos`` and ``sin``: ``positions`` (a column of float positions) times
        ``inv_freq``, doubled (``Concat``), ``Cos`` and ``Sin``, unsqueezed on ``axes``
        to (1, 1, L, D)."""
        freqs = self.node("MatMul", [positions, "inv_freq"], "freqs", "rotary/MatMul")
        emb = self.node("Concat", [freqs, freqs], "emb", "rotary/Concat", axis=-1)
        cos = self.node("Cos", [emb], "cos2", "rotary/Cos")
        sin = self.node("Sin", [emb], "sin2", "rotary/Sin")
        self.node("Unsqueeze", [cos, axes], "cos", "rotary/Unsqueeze_cos")
        self.node("Unsqueeze", [sin, axes], "sin", "rotary/Unsqueeze_sin")

    def rotate_half_constants(self):
        """The constants every layer's attention reads: ``-inf`` of the mask, the
        ``Slice`` bounds of rotate_half, the axis of ``repeat_kv``."""
        self.const("ninf", -np.inf, np.float32)
        for name, value in (("r_start", [0]), ("r_middle", [self.c.dim // 2]),
                            ("r_end", [2 ** 62]), ("r_last", [-1]), ("repeat_axis", [2])):
            self.const(name, value)

    def rope(self, h, prefix):
        x1 = self.node("Slice", [h, "r_start", "r_middle", "r_last"], f"{prefix}.x1",
                       f"{prefix}/Slice")
        x2 = self.node("Slice", [h, "r_middle", "r_end", "r_last"], f"{prefix}.x2",
                       f"{prefix}/Slice_1")
        if self.c.rotation == "half":                   # rotate_half: cat(-x2, x1)
            neg = self.node("Neg", [x2], f"{prefix}.neg", f"{prefix}/Neg")
            halves = [neg, x1]
        else:                                           # the other way: cat(x2, -x1)
            neg = self.node("Neg", [x1], f"{prefix}.neg", f"{prefix}/Neg")
            halves = [x2, neg]
        rh = self.node("Concat", halves, f"{prefix}.rh", f"{prefix}/Concat", axis=-1)
        qc = self.node("Mul", [h, "cos"], f"{prefix}.c", f"{prefix}/Mul")
        rs = self.node("Mul", [rh, "sin"], f"{prefix}.s", f"{prefix}/Mul_1")
        return self.node("Add", [qc, rs], f"{prefix}.rope", f"{prefix}/Add")

    def repeat_kv(self, x, prefix):
        c = self.c
        times = c.heads // c.kv_heads
        seq = 1 if c.kv_cache else c.seq                # dynamic: Expand broadcasts
        shape = self.const(f"{prefix}.expand", [1, c.kv_heads, times, seq, c.dim])
        merged = self.const(f"{prefix}.merged", [1, c.heads, -1 if c.kv_cache else c.seq,
                                                 c.dim])
        x5 = self.node("Unsqueeze", [x, "repeat_axis"], f"{prefix}.x5", f"{prefix}/Unsqueeze")
        xe = self.node("Expand", [x5, shape], f"{prefix}.xe", f"{prefix}/Expand")
        return self.node("Reshape", [xe, merged], f"{prefix}.rep", f"{prefix}/Reshape")

    def attention(self, x, p):
        c = self.c
        n = self.rms_norm(x, f"{p}.input_layernorm")
        heads = {}
        for name, count in (("q", c.heads), ("k", c.kv_heads), ("v", c.kv_heads)):
            # entries of q, k and v of about 2.4 whatever the width (0.3 up to 64
            # features): wider, the scores would grow and the softmax turn one-hot
            w = self.weight(f"{p}.self_attn.{name}_proj.weight.T", (c.hidden, count * c.dim),
                            0.3 * min(1.0, (64 / c.hidden) ** 0.5))
            split = self.const(f"{p}.self_attn.{name}_shape",
                               [1, -1 if c.kv_cache else c.seq, count, c.dim])
            y = self.node("MatMul", [n, w], f"{p}.{name}2", f"{p}/self_attn/{name}_proj")
            y = self.node("Reshape", [y, split], f"{p}.{name}4", f"{p}/self_attn/Reshape_{name}")
            y = self.node("Transpose", [y], f"{p}.{name}h", f"{p}/self_attn/Transpose_{name}",
                          perm=[0, 2, 1, 3])
            if name != "v":
                y = self.rope(y, f"{p}.self_attn.rotary_{name}")
            if name != "q" and c.kv_cache:     # present = Concat(past, new) on axis 2
                kind = "key" if name == "k" else "value"
                y = self.node("Concat", [f"past_key_values.{p.split('.')[-1]}.{kind}", y],
                              f"present.{p.split('.')[-1]}.{kind}",
                              f"{p}/self_attn/Concat_{kind}", axis=2)
            if name != "q" and c.kv_heads != c.heads:
                y = self.repeat_kv(y, f"{p}.self_attn.repeat_{name}")
            heads[name] = y
        scale = self.const(f"{p}.self_attn.scaling", c.dim ** -0.5, np.float32)
        kt = self.node("Transpose", [heads["k"]], f"{p}.kt", f"{p}/self_attn/Transpose_kt",
                       perm=[0, 1, 3, 2])
        s = self.node("MatMul", [heads["q"], kt], f"{p}.scores", f"{p}/self_attn/MatMul")
        s = self.node("Mul", [s, scale], f"{p}.scaled", f"{p}/self_attn/Mul")
        s = self.node("Where", ["keep", s, "ninf"], f"{p}.masked", f"{p}/self_attn/Where")
        s = self.node("Softmax", [s], f"{p}.probs", f"{p}/self_attn/Softmax", axis=-1)
        o = self.node("MatMul", [s, heads["v"]], f"{p}.o", f"{p}/self_attn/MatMul_1")
        o = self.node("Transpose", [o], f"{p}.ot", f"{p}/self_attn/Transpose_o",
                      perm=[0, 2, 1, 3])
        merged = self.const(f"{p}.self_attn.merged", [1, -1 if c.kv_cache else c.seq,
                                                      c.hidden])
        o = self.node("Reshape", [o, merged], f"{p}.om", f"{p}/self_attn/Reshape_o")
        wo = self.weight(f"{p}.self_attn.o_proj.weight.T", (c.hidden, c.hidden), 1.0)
        o = self.node("MatMul", [o, wo], f"{p}.attn", f"{p}/self_attn/o_proj")
        return self.node("Add", [x, o], f"{p}.h", f"{p}/Add")

    def mlp(self, h, p):
        c = self.c
        m = self.rms_norm(h, f"{p}.post_attention_layernorm")
        w = {name: self.weight(f"{p}.mlp.{name}_proj.weight.T", shape, shape[0] ** -0.5)
             for name, shape in (("gate", (c.hidden, c.ffn)), ("up", (c.hidden, c.ffn)),
                                 ("down", (c.ffn, c.hidden)))}
        g = self.node("MatMul", [m, w["gate"]], f"{p}.g", f"{p}/mlp/gate_proj")
        u = self.node("MatMul", [m, w["up"]], f"{p}.u", f"{p}/mlp/up_proj")
        gs = self.node("Sigmoid", [g], f"{p}.gs", f"{p}/mlp/act_fn/Sigmoid")
        ga = self.node("Mul", [g, gs], f"{p}.ga", f"{p}/mlp/act_fn/Mul")
        gu = self.node("Mul", [ga, u], f"{p}.gu", f"{p}/mlp/Mul")
        d = self.node("MatMul", [gu, w["down"]], f"{p}.d", f"{p}/mlp/down_proj")
        return self.node("Add", [h, d], f"{p}.y", f"{p}/Add_1")


def tiny_llama(**values):
    """The tiny Llama of :class:`Config` ``values`` as an ``onnx.ModelProto``."""
    import onnx
    from onnx import TensorProto, helper
    c = Config(**values)
    w = _Writer(c)
    seq = "sequence_length" if c.kv_cache else c.seq
    if c.embedding == "gather":
        inputs = [helper.make_tensor_value_info("input_ids", TensorProto.INT64, [1, seq])]
        table = w.weight("model.embed_tokens.weight", (c.vocab, c.hidden), c.hidden ** -0.5)
        x = w.node("Gather", [table, "input_ids"], "inputs_embeds", "embed_tokens/Gather",
                   axis=0)
    else:
        inputs = [helper.make_tensor_value_info("inputs_embeds", TensorProto.FLOAT,
                                                [1, seq, c.hidden])]
        x = "inputs_embeds"
    if c.kv_cache:
        inputs += _cache_inputs(c)
        w.shared_cache()
    else:
        w.shared(x)
    for layer in range(c.layers):
        p = f"model.layers.{layer}"
        x = w.mlp(w.attention(x, p), p)
    x = w.rms_norm(x, "model.norm")
    if c.vocab:
        head = w.weight("lm_head.weight.T", (c.hidden, c.vocab), c.hidden ** -0.5)
        x = w.node("MatMul", [x, head], "logits_", "lm_head/MatMul")
        out = helper.make_tensor_value_info("logits", TensorProto.FLOAT,
                                            [1, seq, c.vocab])
    else:
        out = helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT,
                                            [1, seq, c.hidden])
    w.node("Identity", [x], out.name, "output/Identity")
    outputs = [out] + (_cache_outputs(c) if c.kv_cache else [])
    graph = helper.make_graph(w.nodes, "tiny_llama", inputs, outputs, w.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)],
                              producer_name="rdu.onnx.tiny_llama")
    model.ir_version = 10
    onnx.checker.check_model(model)
    return model


def _cache_inputs(c):
    """``position_ids`` (1, L), ``attention_mask`` (1, P + L) and the past (1, G, P,
    D) of every layer, the dimensions named as onnxruntime-genai's models name them."""
    from onnx import TensorProto, helper
    past = [helper.make_tensor_value_info(f"past_key_values.{i}.{kind}", TensorProto.FLOAT,
                                          [1, c.kv_heads, "past_sequence_length", c.dim])
            for i in range(c.layers) for kind in ("key", "value")]
    return [helper.make_tensor_value_info("position_ids", TensorProto.INT64,
                                          [1, "sequence_length"]),
            helper.make_tensor_value_info("attention_mask", TensorProto.INT64,
                                          [1, "total_sequence_length"])] + past


def _cache_outputs(c):
    """``present.{i}.key``, ``.value`` (1, G, P + L, D)."""
    from onnx import TensorProto, helper
    return [helper.make_tensor_value_info(f"present.{i}.{kind}", TensorProto.FLOAT,
                                          [1, c.kv_heads, "total_sequence_length", c.dim])
            for i in range(c.layers) for kind in ("key", "value")]


class _Parser(argparse.ArgumentParser):
    """Usage errors as one line, exit status 2."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


def main(argv=None):
    """``python -m rdu.onnx.tiny_llama ... -o FILE``: write the model; exit 2 with one
    line on stderr for a bad option."""
    parser = _Parser(
        prog="python -m rdu.onnx.tiny_llama",
        description="Write a tiny Llama-architecture ONNX model with seeded random "
                    "weights (docs/onnx.md, 'A tiny Llama').",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    for name, default in Config.FIELDS:
        flag = "--" + name.replace("_", "-")
        if name == "kv_cache":
            parser.add_argument(flag, action="store_true",
                                help="the exporter's form with a KV cache: inputs "
                                     "position_ids, attention_mask and past_key_values.*, "
                                     "outputs present.*, the sequence and the past "
                                     "dynamic (--seq unused)")
            continue
        helps = {"layers": "decoder layers", "hidden": "hidden size",
                 "heads": "query heads", "ffn": "the MLP's intermediate size",
                 "seq": "sequence length (tokens)", "seed": "the weights' seed",
                 "eps": "RMSNorm epsilon", "theta": "rotary base",
                 "kv_heads": "key/value heads (0: as many as --heads)",
                 "vocab": "vocabulary: the LM head's width (0: no LM head, the output "
                          "is the final hidden states)",
                 "embedding": "host: the model reads inputs_embeds (the host looks the "
                              "rows up); gather: Gather of input_ids (needs --vocab; rdu run "
                              "looks the rows up)",
                 "rotation": "rotary's rotation of each head's halves: half (HF's "
                             "rotate_half, cat(-x2, x1)) or reversed (cat(x2, -x1))"}
        parser.add_argument(flag, type=type(default), default=default,
                            help=helps[name])
    parser.add_argument("-o", "--output", required=True, help="the .onnx file to write")
    args = parser.parse_args(argv)
    values = {name: getattr(args, name) for name, _ in Config.FIELDS}
    try:
        model = tiny_llama(**values)
    except ValueError as error:
        print(f"{parser.prog}: error: {error}", file=sys.stderr)
        return 2
    import onnx
    try:
        onnx.save(model, args.output)
    except OSError as error:
        print(f"{parser.prog}: error: {args.output}: {error.strerror}", file=sys.stderr)
        return 2
    print(f"{args.output}: {Config(**values).layers} layers, {len(model.graph.node)} nodes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
