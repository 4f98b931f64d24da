"""The kernel IR: what a kernel computes and how data streams between units.

A :class:`Kernel` is a dataflow graph. Its nodes are the work of one unit each:

* :class:`Load` / :class:`Store` (an AGCU): a tensor in HBM or DDR streamed in or out
  along an :class:`AccessPattern`;
* :class:`Buffer` (a PMU): a scratchpad region written along one pattern and read
  along another;
* :class:`Compute` (a PCU): a matmul (systolic body), an elementwise map or a
  reduction (SIMD body), or a special function (tail).

Its edges are :class:`Stream` s on one of the three networks, from one producer port
to one or more consumer ports (more than one is a multicast). The mapper
(:mod:`rdu.mapper`) places the nodes on units and routes the streams.

Example::

    k = Kernel("copy")
    x = k.tensor("x", (64, 8), "fp32", memory="hbm")
    y = k.tensor("y", (64, 8), "fp32", memory="hbm")
    loaded = k.load(x, AccessPattern.linear(64))
    buf = k.buffer("stage", words=64 * 8, inputs=[loaded])
    k.store(buf.output(), y, AccessPattern.linear(64))
"""

from dataclasses import dataclass, field

from hdl.interfaces import NETWORKS

from . import affine

__all__ = ["IRError", "AccessPattern", "BlockOffset", "Tensor", "Port", "Stream", "Merge",
           "Node", "Load", "Store", "Buffer", "Compute", "Kernel", "DTYPES", "MEMORIES", "NETWORKS"]

DTYPES = {"bf16": 2, "fp32": 4, "int32": 4}
MEMORIES = ("hbm", "ddr")
COMPUTE_OPS = ("matmul", "map", "reduce", "exp", "reciprocal")


class IRError(ValueError):
    """A kernel description that is malformed (says what and where)."""


@dataclass(frozen=True)
class AccessPattern:
    """A three-level affine loop over vector beats (innermost level first).

    The address of beat ``(i0, i1, i2)`` is ``start + i0*strides[0] + i1*strides[1]
    + i2*strides[2]`` with ``0 <= i_n < counts[n]``; addresses count vector beats
    (``lanes`` words) for AGCUs and PMU words for buffers, as the unit documents.
    """
    start: int
    counts: tuple
    strides: tuple

    def __post_init__(self):
        if len(self.counts) != 3 or len(self.strides) != 3:
            raise IRError(f"access pattern needs 3 counts and 3 strides, got "
                          f"{len(self.counts)} and {len(self.strides)}")
        if any(not isinstance(c, int) or c < 1 for c in self.counts):
            raise IRError(f"access pattern counts must be positive integers, not "
                          f"{self.counts}")
        if isinstance(self.start, int) and self.start < 0:
            raise IRError(f"access pattern start must be non-negative, not {self.start}")

    @classmethod
    def linear(cls, count, start=0, stride=1):
        return cls(start, (count, 1, 1), (stride, 0, 0))

    @property
    def length(self):
        return affine.beats(self.counts)

    def addresses(self):
        """Every address in order (:func:`rdu.affine.iter_addresses`, the reference the
        hardware generators must match)."""
        return affine.iter_addresses(self.start, self.counts, self.strides)

    def span(self):
        """(lowest, highest) address touched."""
        low = high = self.start
        for count, stride in zip(self.counts, self.strides, strict=True):
            extent = (count - 1) * stride
            if extent < 0:
                low += extent
            else:
                high += extent
        return low, high


@dataclass(frozen=True)
class Tensor:
    name: str
    shape: tuple
    dtype: str
    memory: str

    @property
    def elements(self):
        total = 1
        for dim in self.shape:
            total *= dim
        return total

    @property
    def nbytes(self):
        return self.elements * DTYPES[self.dtype]


@dataclass(frozen=True)
class Port:
    """One port of one node: ``node`` name, port ``name``, ``network``."""
    node: str
    name: str
    network: str


@dataclass
class Stream:
    """A static route from one producer port to one or more consumer ports."""
    name: str
    source: Port
    sinks: list = field(default_factory=list)

    @property
    def network(self):
        return self.source.network

    @property
    def multicast(self):
        return len(self.sinks) > 1

    @property
    def sources(self):
        return [self.source]


@dataclass
class Merge(Stream):
    """Several producer streams funnelled into one consumer in a fixed order.

    The switches take ``counts[i]`` items from ``inputs[i]`` in turn (a statically
    sequenced merge, ``docs/switch.md``); where the inputs' routes join, and so the
    order of the merged stream, is the mapper's choice: :attr:`rdu.mapper.Route.order`
    gives it.
    """
    inputs: list = field(default_factory=list)     # the merged Streams
    counts: list = field(default_factory=list)     # items per turn of each

    @property
    def sources(self):
        return [stream.source for stream in self.inputs]


@dataclass(frozen=True)
class BlockOffset:
    """A configuration value fixed only after routing: ``base + step * block``, where
    ``block`` is the row block of the producer named by the node's ``block_of``
    (:mod:`rdu.compiler.bind` resolves it from the merge order)."""
    base: int
    step: int

    def resolve(self, block):
        return self.base + self.step * block


@dataclass
class Node:
    name: str
    unit: str = field(init=False, default="")     # "agcu", "pmu" or "pcu"
    inputs: list = field(default_factory=list)    # Streams consumed, in port order
    #: the unit's configuration as IR data: the fields of the unit's layout, with
    #: :class:`AccessPattern` for address patterns and :class:`BlockOffset` for values
    #: fixed after routing (the unit's encoder in :mod:`rdu.units` packs it)
    config: dict = field(default_factory=dict)
    #: node whose row block the :class:`BlockOffset` values use (None: none)
    block_of: str = None

    def input_ports(self):
        """Ports that must be fed (in the order of ``inputs``)."""
        return []

    def optional_input_ports(self):
        """Ports that may be fed with :meth:`Kernel.connect` (e.g. start tokens)."""
        return []

    def output_ports(self):
        return []


@dataclass
class Load(Node):
    tensor: Tensor = None
    pattern: AccessPattern = None

    def __post_init__(self):
        self.unit = "agcu"

    def output_ports(self):
        # control_out: the launch token the AGCU sends when the kernel starts
        return [Port(self.name, "vector_out", "vector"), Port(self.name, "control_out", "control")]


@dataclass
class Store(Node):
    tensor: Tensor = None
    pattern: AccessPattern = None

    def __post_init__(self):
        self.unit = "agcu"

    def input_ports(self):
        return [Port(self.name, "vector_in", "vector")]

    def optional_input_ports(self):
        return [Port(self.name, "control_in", "control")]


@dataclass
class Buffer(Node):
    words: int = 0
    write_pattern: AccessPattern = None
    read_pattern: AccessPattern = None
    buffers: int = 1            # N-buffering

    def __post_init__(self):
        self.unit = "pmu"

    def input_ports(self):
        return [Port(self.name, "vector_in", "vector")]

    def optional_input_ports(self):
        return [Port(self.name, "control_in", "control")]

    def output_ports(self):
        # control_out: one token per buffer released (docs/pmu.md)
        return [Port(self.name, "vector_out", "vector"), Port(self.name, "control_out", "control")]


@dataclass
class Compute(Node):
    op: str = "map"
    params: dict = field(default_factory=dict)
    arity: int = 1              # vector inputs used (matmul: 2)

    def __post_init__(self):
        self.unit = "pcu"
        if self.op not in COMPUTE_OPS:
            raise IRError(f"compute node {self.name!r}: unknown op {self.op!r}; expected "
                          f"one of {', '.join(COMPUTE_OPS)}")

    def input_ports(self):
        return [Port(self.name, f"vector_in{index}", "vector") for index in range(self.arity)]

    def optional_input_ports(self):
        # scalar_in: one word per inner loop (the SIMD ``SCALAR`` operand)
        return [Port(self.name, "control_in", "control"),
                Port(self.name, "scalar_in", "scalar")]

    def output_ports(self):
        # scalar_out: the SIMD cross-lane reductions
        return [Port(self.name, "vector_out", "vector"),
                Port(self.name, "control_out", "control"),
                Port(self.name, "scalar_out", "scalar")]


class Kernel:
    """A dataflow kernel under construction (see the module docstring)."""

    def __init__(self, name):
        if not name or not name.replace("_", "").isalnum():
            raise IRError(f"kernel name must be alphanumeric (underscores allowed), "
                          f"not {name!r}")
        self.name = name
        self.tensors = {}
        self.nodes = {}
        self.streams = []
        self._producer = {}       # Port -> Stream
        #: lists of producer nodes whose results one store writes as consecutive row
        #: blocks (in merge order, fixed by routing; :mod:`rdu.compiler.bind`)
        self.row_groups = []

    # -- tensors -----------------------------------------------------------------------

    def tensor(self, name, shape, dtype, memory="hbm"):
        if name in self.tensors:
            raise IRError(f"kernel {self.name!r}: tensor {name!r} defined twice")
        if dtype not in DTYPES:
            raise IRError(f"tensor {name!r}: dtype {dtype!r} is not one of "
                          f"{', '.join(DTYPES)}")
        if memory not in MEMORIES:
            raise IRError(f"tensor {name!r}: memory {memory!r} is not one of "
                          f"{', '.join(MEMORIES)}")
        shape = tuple(shape)
        if not shape or any(not isinstance(d, int) or d < 1 for d in shape):
            raise IRError(f"tensor {name!r}: shape {shape} must be positive integers")
        tensor = Tensor(name, shape, dtype, memory)
        self.tensors[name] = tensor
        return tensor

    # -- nodes -------------------------------------------------------------------------

    def _add(self, node, inputs=()):
        if node.name in self.nodes:
            raise IRError(f"kernel {self.name!r}: node {node.name!r} defined twice")
        self.nodes[node.name] = node
        ports = node.input_ports()
        inputs = list(inputs)
        if len(inputs) > len(ports):
            raise IRError(f"node {node.name!r} takes {len(ports)} inputs, got {len(inputs)}")
        for stream, port in zip(inputs, ports, strict=False):
            if stream.network != port.network:
                raise IRError(f"node {node.name!r} port {port.name}: a {stream.network} "
                              f"stream cannot feed a {port.network} port")
            stream.sinks.append(port)
            node.inputs.append(stream)
        return node

    def output(self, node, port_name="vector_out"):
        """The stream leaving ``node``'s port ``port_name`` (created on first use)."""
        for port in node.output_ports():
            if port.name == port_name:
                if port not in self._producer:
                    stream = Stream(f"{node.name}.{port_name}", port)
                    self._producer[port] = stream
                    self.streams.append(stream)
                return self._producer[port]
        raise IRError(f"node {node.name!r} has no output port {port_name!r}")

    def connect(self, stream, node, port_name):
        """Feed ``stream`` into an optional input port of ``node`` (e.g. ``control_in``)."""
        for port in node.optional_input_ports():
            if port.name == port_name:
                if stream.network != port.network:
                    raise IRError(f"node {node.name!r} port {port_name}: a {stream.network} "
                                  f"stream cannot feed a {port.network} port")
                if any(port in s.sinks for s in self.streams):
                    raise IRError(f"node {node.name!r} port {port_name} is already fed")
                stream.sinks.append(port)
                return stream
        raise IRError(f"node {node.name!r} has no optional input port {port_name!r}")

    def merge(self, name, streams, counts):
        """One stream that takes ``counts[i]`` items from ``streams[i]`` in turn."""
        streams, counts = list(streams), list(counts)
        if len(streams) < 2:
            raise IRError(f"merge {name!r} needs at least 2 streams, got {len(streams)}")
        if len(counts) != len(streams):
            raise IRError(f"merge {name!r}: {len(streams)} streams but {len(counts)} counts")
        if any(not isinstance(c, int) or c < 1 for c in counts):
            raise IRError(f"merge {name!r}: counts must be positive integers, not {counts}")
        networks = {stream.network for stream in streams}
        if len(networks) != 1:
            raise IRError(f"merge {name!r} mixes networks {sorted(networks)}")
        for stream in streams:
            if stream.sinks or any(stream in getattr(m, "inputs", ()) for m in self.streams):
                raise IRError(f"merge {name!r}: stream {stream.name!r} already has a consumer")
        merged = Merge(name, streams[0].source, inputs=streams, counts=counts)
        for stream in streams:
            self.streams.remove(stream)
        self.streams.append(merged)
        return merged

    def load(self, tensor, pattern, name=None, *, config=None, block_of=None):
        node = self._add(Load(name or f"load_{tensor.name}", tensor=tensor, pattern=pattern,
                              config=dict(config or {}), block_of=block_of))
        return self.output(node)

    def store(self, stream, tensor, pattern, name=None, *, config=None, block_of=None):
        return self._add(Store(name or f"store_{tensor.name}", tensor=tensor,
                               pattern=pattern, config=dict(config or {}),
                               block_of=block_of), [stream])

    def buffer(self, name, words, inputs, write_pattern=None, read_pattern=None, buffers=1,
               *, config=None, block_of=None):
        node = self._add(Buffer(name, words=words, write_pattern=write_pattern,
                                read_pattern=read_pattern, buffers=buffers,
                                config=dict(config or {}), block_of=block_of), inputs)
        return self.output(node)

    def compute(self, name, op, inputs, *, config=None, arity=None, **params):
        inputs = list(inputs)
        arity = arity or (2 if op == "matmul" else len(inputs))
        if not 1 <= arity <= 2:
            raise IRError(f"compute node {name!r} takes 1 or 2 vector inputs, got {arity}")
        node = self._add(Compute(name, op=op, params=params, arity=arity,
                                 config=dict(config or {})), inputs)
        return self.output(node)

    # -- checks ------------------------------------------------------------------------

    def validate(self):
        """Check the graph is complete: every input fed, every stream consumed."""
        for node in self.nodes.values():
            missing = len(node.input_ports()) - len(node.inputs)
            if missing > 0:
                raise IRError(f"kernel {self.name!r}: node {node.name!r} has {missing} "
                              f"unconnected input(s)")
        for stream in self.streams:
            if not stream.sinks and stream.network != "control":
                raise IRError(f"kernel {self.name!r}: stream {stream.name!r} has no consumer")
        return self

    def units_needed(self):
        counts = {"agcu": 0, "pmu": 0, "pcu": 0}
        for node in self.nodes.values():
            counts[node.unit] += 1
        return counts
