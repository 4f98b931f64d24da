"""Test bodies of :class:`hdl.array.TileArray`: bitstream load/readback, corrupted
bitstreams, random multicast routes across the mesh, a PMU kernel end to end."""

from amaranth.lib import data
from rdu.bitstream import (
    BitstreamError,
    Geometry,
    Record,
    UnitKind,
    cleared,
    read_bitstream,
    write_bitstream,
)

from hdl.config_net import ConfigStatus, LoaderState
from hdl.interfaces import NETWORKS, ControlToken, config_words
from hdl.pmu import pmu_config_layout
from hdl.switch import Direction, Source, VectorOutput, switch_config_layout

from .common import pack_config, pack_vector, ports_to_json
from .pmu import PMUModel, affine_addresses, pattern, pmu_config

NORTH, EAST, SOUTH, WEST = Direction
LOCAL0 = VectorOutput.LOCAL0


def array_targets(rows, cols, agcus, agcu_words):
    """``[(kind, row, col, words)]`` of an all-PMU array, in configuration-bus order."""
    targets = []
    for row in range(rows):
        for col in range(cols):
            targets.append((UnitKind.PMU, row, col, config_words(pmu_config_layout())))
            targets.append((UnitKind.SWITCH, row, col, config_words(switch_config_layout())))
    for index in range(agcus):
        targets.append((UnitKind.AGCU, 0, index, agcu_words))
    return targets


def _layout_bits(kind):
    if kind == UnitKind.PMU:
        return data.Layout.cast(pmu_config_layout()).size
    if kind == UnitKind.SWITCH:
        return data.Layout.cast(switch_config_layout()).size
    return None


def random_words(rng, kind, words):
    """Random configuration words; bits past the layout read back as zero, so clear them."""
    values = [rng.getrandbits(32) for _ in range(words)]
    bits = _layout_bits(kind)
    if bits is not None and bits % 32:
        values[-1] &= (1 << (bits % 32)) - 1
    return values


async def load_bitstream(bench, words, expect_state=LoaderState.LOADED, timeout=20_000):
    source = getattr(bench, "bitstream_source", None)
    if source is None:
        source = bench.bitstream_source = bench.source("bitstream")
    source.send_all(words)
    await bench.streams_done(timeout=timeout)
    for _ in range(timeout):
        state = await bench.read("host.config_state")
        if state != LoaderState.LOADING:
            break
        await bench.cycles(1)
    assert state == expect_state, (f"configuration state {state}, expected {expect_state} "
                                   f"(error {await bench.read('host.error')})")


async def pulse(bench, path):
    await bench.cycles(1)          # a set must follow an edge, not a read
    bench.set(path, 1)
    await bench.cycles(1)
    bench.set(path, 0)


# --------------------------------------------------------------------------------------
# Configuration
# --------------------------------------------------------------------------------------

def _second_records(rng, targets, contents):
    """Records of a second load over ``contents``: a random half of the units get a clear
    record (all zero, or random words ending in zeros the record leaves out); the others
    get none and keep their words. Updates ``contents``."""
    records = []
    for kind, row, col, count in targets:
        if rng.random() < 0.5:
            continue
        words = random_words(rng, kind, count)
        zeros = count if rng.random() < 0.3 else rng.randrange(count + 1)
        words[count - zeros:] = [0] * zeros
        contents[kind, row, col] = words
        records.append(cleared(UnitKind(kind), row, col, words))
    return records


async def array_config_roundtrip(bench, *, rows, cols, lanes, agcus, agcu_words):
    """Random configuration of every unit, records in random order; read it all back.
    Then a second load where half the units get clear records (the words they leave out
    read back as zero) and the others no record (they keep the first load's words)."""
    targets = array_targets(rows, cols, agcus, agcu_words)
    contents = {tuple(t[:3]): random_words(bench.rng, t[0], t[3]) for t in targets}
    records = [Record(UnitKind(kind), row, col, contents[kind, row, col])
               for kind, row, col, _ in targets]
    result = {}
    for load in ("first", "second"):
        if load == "second":
            records = _second_records(bench.rng, targets, contents)
        bench.rng.shuffle(records)
        words = write_bitstream(Geometry(rows, cols, lanes), records)
        read_bitstream(words, Geometry(rows, cols, lanes),
                       {tuple(t[:3]): t[3] for t in targets})
        load_start = bench.cycle
        await load_bitstream(bench, words)
        result[f"{load}_words"] = len(words)
        result[f"{load}_load_cycles"] = bench.cycle - load_start
        assert await bench.read("host.error") == ConfigStatus.OK
        result["readback_words"] = await _readback_equals(bench, targets, contents)
    return result


async def _readback_equals(bench, targets, contents):
    """Read every target back and check it against ``contents``; the words read."""
    expected = []
    for kind, row, col, count in targets:
        expected.append(count | col << 8 | row << 16 | kind << 24)
        # AGCUs sit outside the array: with none attached to agcu_cfg, they read as 0
        expected += [0] * count if kind == UnitKind.AGCU else contents[kind, row, col]
    sink = getattr(bench, "readback_sink", None)
    if sink is None:
        sink = bench.readback_sink = bench.sink("readback", "random")
    sink.expect_all(expected)
    await pulse(bench, "host.readback_start")
    await bench.streams_done(timeout=10 * len(expected) + 100)
    return len(expected)


BAD_CASES = ("bad_crc", "wrong_geometry", "truncated", "bad_magic", "bad_version",
             "bad_record", "record_overrun")


async def array_bad_bitstream(bench, *, rows, cols, lanes, agcus, agcu_words, case):
    """A corrupted bitstream sets the documented error and the array never starts;
    after ``config_clear`` a good bitstream loads."""
    targets = array_targets(rows, cols, agcus, agcu_words)
    units = {tuple(t[:3]): t[3] for t in targets}
    records = [Record(UnitKind(kind), row, col, random_words(bench.rng, kind, count))
               for kind, row, col, count in targets[:6]]
    geometry = Geometry(rows, cols, lanes)
    good = write_bitstream(geometry, records)
    words = list(good)
    if case == "bad_crc":
        words[7] ^= 1 << bench.rng.randrange(32)
    elif case == "wrong_geometry":
        words = write_bitstream(Geometry(rows + 1, cols, lanes), records)
    elif case == "truncated":
        words = words[:-3]
    elif case == "bad_magic":
        words[0] ^= 0x100
    elif case == "bad_version":
        words[1] = 1 | 5 << 16      # the version before clear records
    elif case == "bad_record":
        words = write_bitstream(geometry, records + [Record(UnitKind.PMU, rows, 0, [1])])
    elif case == "record_overrun":
        words[3] -= 2          # the last record now runs past the declared payload
        words = words[:-2]
    try:
        read_bitstream(words, geometry, units)
        raise AssertionError(f"the Python validator accepted the {case} bitstream")
    except BitstreamError as error:
        expected = int(error.status)
    await load_bitstream(bench, words, expect_state=LoaderState.ERROR)
    code = await bench.read("host.error")
    assert code == expected, f"{case}: hardware error {code}, software says {expected}"
    # the array must refuse to start: edge inputs stay closed, nothing runs
    await pulse(bench, "host.start")
    bench.set("agcu_vector_in.0.valid", 1)
    for _ in range(20):
        assert await bench.read("host.running") == 0, "array started on a bad bitstream"
        assert await bench.read("agcu_vector_in.0.ready") == 0
        await bench.cycles(1)
    bench.set("agcu_vector_in.0.valid", 0)
    await pulse(bench, "host.config_clear")
    await load_bitstream(bench, good)
    assert await bench.read("host.error") == ConfigStatus.OK
    return {"error": code}


# --------------------------------------------------------------------------------------
# Mesh routes
# --------------------------------------------------------------------------------------

def route_tree(rows, cols, source, destinations):
    """Switch settings ``{(row, col, output): input}`` of a dimension-ordered (X then Y)
    multicast route from edge input ``source`` to edge outputs ``destinations``."""
    settings = {}

    def set_port(key, value):
        if settings.get(key, value) != value:
            raise ValueError("conflict")
        settings[key] = value

    for dest in destinations:
        row, col = (source, 0) if source < rows else (source - rows, cols - 1)
        came = Source.WEST if source < rows else Source.EAST
        dest_row, dest_col, exit_dir = ((dest, 0, WEST) if dest < rows
                                        else (dest - rows, cols - 1, EAST))
        while col != dest_col:
            out = EAST if dest_col > col else WEST
            set_port((row, col, out), came)
            col += 1 if out == EAST else -1
            came = Source.WEST if out == EAST else Source.EAST
        while row != dest_row:
            out = SOUTH if dest_row > row else NORTH
            set_port((row, col, out), came)
            row += 1 if out == SOUTH else -1
            came = Source.NORTH if out == SOUTH else Source.SOUTH
        set_port((row, col, exit_dir), came)
    return settings


def random_route_set(rng, rows, cols, attempts):
    """Random non-conflicting multicast routes between edge ports: ``[(source, dests)]``
    and the switch settings ``{(row, col, output): input}``."""
    used, routes = {}, []
    free_sources = list(range(2 * rows))
    free_dests = list(range(2 * rows))
    for _ in range(attempts):
        if not free_sources or not free_dests:
            break
        source = rng.choice(free_sources)
        dests = rng.sample(free_dests, min(len(free_dests), rng.randint(1, 3)))
        try:
            tree = route_tree(rows, cols, source, dests)
        except ValueError:
            continue
        if any(key in used for key in tree):
            continue
        used.update(tree)
        routes.append((source, dests))
        free_sources.remove(source)
        for dest in dests:
            free_dests.remove(dest)
    return routes, used


def switch_records(rows, cols, settings_by_network, extra=()):
    tables = {}
    for network, settings in settings_by_network.items():
        outputs = 6 if network == "vector" else 5
        for (row, col, out), source in settings.items():
            table = tables.setdefault((row, col), {"vector": [0] * 6, "scalar": [0] * 5,
                                                    "control": [0] * 5})
            assert out < outputs
            table[network][out] = source
    for (row, col, network, out), source in extra:
        table = tables.setdefault((row, col), {"vector": [0] * 6, "scalar": [0] * 5,
                                                "control": [0] * 5})
        table[network][out] = source
    return [Record(UnitKind.SWITCH, row, col, pack_config(switch_config_layout(), table))
            for (row, col), table in sorted(tables.items())]


async def array_mesh_routes(bench, *, rows, cols, lanes, count, in_stall="random",
                            out_stall="random"):
    """Random static multicast route sets on all three networks carry random traffic
    under random stalls: per route nothing lost, duplicated or reordered."""
    settings, routes = {}, {}
    for network in NETWORKS:
        routes[network], settings[network] = random_route_set(bench.rng, rows, cols, 4 * rows)
    words = write_bitstream(Geometry(rows, cols, lanes), switch_records(rows, cols, settings))
    await load_bitstream(bench, words)
    widths = {"vector": 32 * lanes, "scalar": 32, "control": 1}
    delivered = 0
    multicasts = 0
    edge_inputs, expected = {}, {}           # the run as edge items (for rdu.models.array)
    for network in NETWORKS:
        for source, dests in routes[network]:
            if network == "control":
                items = [ControlToken.STEP] * count      # a DONE token would end the run
            else:
                items = [bench.rng.getrandbits(widths[network]) for _ in range(count)]
            bench.source(f"agcu_{network}_in.{source}", in_stall).send_all(items)
            edge_inputs[network, source] = items
            for dest in dests:
                bench.sink(f"agcu_{network}_out.{dest}", out_stall).expect_all(items)
                expected[network, dest] = items
                delivered += count
            multicasts += len(dests) > 1
    # outputs on no route must stay silent
    for network in NETWORKS:
        for dest in range(2 * rows):
            if not any(dest in dests for _, dests in routes[network]):
                bench.sink(f"agcu_{network}_out.{dest}")
    await pulse(bench, "host.start")
    assert await bench.read("host.running") == 1
    await bench.streams_done(timeout=60 * count + 2000)
    stalls = []
    for index in range(3 * rows * cols):
        bench.set("host.perf_select", index)
        await bench.cycles(1)
        stalls.append(await bench.read("host.perf_value"))
        await bench.cycles(1)
    return {"delivered": delivered, "multicasts": multicasts, "stall_cycles": sum(stalls),
            "routes": {n: len(r) for n, r in routes.items()}, "bitstream": words,
            "edge_inputs": ports_to_json(edge_inputs),
            "expected_outputs": ports_to_json(expected)}


# --------------------------------------------------------------------------------------
# A PMU kernel end to end
# --------------------------------------------------------------------------------------

async def array_pmu_transpose(bench, *, rows, cols, lanes, matrix_rows, matrix_cols,
                              in_stall="random", out_stall="random"):
    """The PMU at (0, 0) receives a matrix from the west edge of row 0, sends its transpose
    to the east edge of row 0 and a DONE token that ends the run (``host.done``)."""
    skew = matrix_cols.bit_length() - 1
    config = pmu_config(lanes, write=pattern("row_major", lanes, matrix_rows, matrix_cols),
                        read=pattern("column_major", lanes, matrix_rows, matrix_cols),
                        buffer_words=matrix_rows * matrix_cols, skew_shift=skew,
                        read_passes=1)
    pmu_words = pack_config(pmu_config_layout(), config)
    extra = [((0, 0, "vector", LOCAL0), Source.WEST),           # west edge -> PMU
             ((0, 0, "vector", EAST), Source.LOCAL),            # PMU -> east
             ((0, 0, "control", EAST), Source.LOCAL)]
    for col in range(1, cols):
        extra += [((0, col, "vector", EAST), Source.WEST),
                  ((0, col, "control", EAST), Source.WEST)]
    records = [Record(UnitKind.PMU, 0, 0, pmu_words)] + switch_records(rows, cols, {}, extra)
    await load_bitstream(bench, write_bitstream(Geometry(rows, cols, lanes), records))
    model = PMUModel(config, lanes)
    beats = [[bench.rng.getrandbits(32) for _ in range(lanes)]
             for _ in affine_addresses(config["write"])]
    model.write_pass(0, beats)
    bench.source("agcu_vector_in.0", in_stall).send_all(pack_vector(b) for b in beats)
    bench.sink(f"agcu_vector_out.{rows}", out_stall).expect_all(
        pack_vector(b) for b in model.read_pass(0))
    bench.sink(f"agcu_control_out.{rows}").expect(ControlToken.DONE)
    await pulse(bench, "host.start")
    await bench.wait_for("host.done", 1, timeout=100 * len(beats) + 1000)
    await bench.streams_done(timeout=1000)
    cycles = await bench.read("host.cycles")
    assert await bench.read("host.running") == 0
    assert await bench.read("host.unit_error") == 0
    await bench.cycles(5)
    assert await bench.read("host.cycles") == cycles, "cycle counter runs after done"
    await bench.cycles(1)
    bench.set("host.perf_select", 3 * rows * cols + 2)        # pmu(0,0).beats_written
    await bench.cycles(1)
    written = await bench.read("host.perf_value")
    assert written == len(beats), f"beats_written counter {written}, expected {len(beats)}"
    return {"cycles": cycles, "beats": len(beats)}


async def array_two_input_unit(bench, *, rows, cols, lanes, count, offset):
    """Both local vector outputs of a compute position: the test-only lane adder at (0, 0)
    adds a stream from the west edge (local0) and one from the east edge (local1); the sum
    leaves at the west edge of row 1."""
    extra = [((0, 0, "vector", LOCAL0), Source.WEST),
             ((0, 0, "vector", LOCAL0 + 1), Source.EAST),
             ((0, 0, "vector", SOUTH), Source.LOCAL),
             ((1, 0, "vector", WEST), Source.NORTH)]
    for col in range(1, cols):
        extra.append(((0, col, "vector", WEST), Source.EAST))
    records = [Record(UnitKind.PCU, 0, 0, [offset])] + switch_records(rows, cols, {}, extra)
    await load_bitstream(bench, write_bitstream(Geometry(rows, cols, lanes), records))
    first = [[bench.rng.getrandbits(32) for _ in range(lanes)] for _ in range(count)]
    second = [[bench.rng.getrandbits(32) for _ in range(lanes)] for _ in range(count)]
    bench.source("agcu_vector_in.0", "random").send_all(pack_vector(b) for b in first)
    bench.source(f"agcu_vector_in.{rows}", "random").send_all(pack_vector(b) for b in second)
    bench.sink("agcu_vector_out.1", "random").expect_all(
        pack_vector([(x + y + offset) & 0xFFFF_FFFF for x, y in zip(a, b, strict=True)])
        for a, b in zip(first, second, strict=True))
    await pulse(bench, "host.start")
    await bench.streams_done(timeout=50 * count + 1000)
    return {"beats": count}


async def array_agcu_config(bench, *, rows, cols, lanes, agcus, agcu_words):
    """AGCU records leave the array on ``agcu_cfg[i]``: index and data of every write."""
    contents = {index: [bench.rng.getrandbits(32) for _ in range(agcu_words)]
                for index in range(agcus)}
    records = [Record(UnitKind.AGCU, 0, index, words) for index, words in contents.items()]
    bench.rng.shuffle(records)
    bench.source("bitstream", "random").send_all(
        write_bitstream(Geometry(rows, cols, lanes), records))
    seen = {index: [] for index in range(agcus)}
    for _ in range(40 * agcus * agcu_words + 200):
        for index in range(agcus):
            if await bench.read(f"agcu_cfg.{index}.write"):
                seen[index].append((await bench.read(f"agcu_cfg.{index}.index"),
                                    await bench.read(f"agcu_cfg.{index}.data")))
        if await bench.read("host.config_state") == LoaderState.LOADED:
            break
        await bench.cycles(1)
    for index, words in contents.items():
        assert seen[index] == list(enumerate(words)), f"AGCU {index} got {seen[index]}"
    return {"writes": sum(len(v) for v in seen.values())}
