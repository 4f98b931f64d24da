"""The IP top (hdl/ip.py, docs/ip.md): the register map from its SystemRDL source, the
AXI4-Lite register file in the Amaranth simulator, the C header under gcc, the flat
port names, and (Verilator tier) a GEMM driven as a CPU driver drives it, on
cocotbext-axi's AXI models with random pauses on every channel, and the bad starts."""

import re
import shutil
import subprocess

import numpy as np
import pytest
from amaranth.sim import Simulator

pytest.importorskip("systemrdl", reason="the 'ip' extra (systemrdl-compiler) is needed")

from hdl.regmap import FIELD_KINDS, AXI4LiteRegisters, register_map  # noqa: E402

#: ``ID.MAGIC``: 'RDUI' (not the bitstream's magic)
MAGIC = int.from_bytes(b"RDUI", "big")


# -- the map ------------------------------------------------------------------------------

def test_register_map_is_consistent():
    regmap = register_map()
    offsets = [r.offset for r in regmap.registers]
    assert offsets == sorted(set(offsets)) and all(o % 4 == 0 for o in offsets)
    for register in regmap.registers:
        used = 0
        for field in register.fields:
            assert field.kind in FIELD_KINDS
            assert field.lsb + field.width <= 32
            assert used & field.mask == 0, f"{register.name}.{field.name} overlaps"
            used |= field.mask
    assert regmap["ID"].reset == MAGIC
    assert regmap["CONTROL"].field("START").kind == "pulse"
    assert regmap["IRQ_STATUS"].field("ERROR").kind == "sticky"
    sources = regmap.enum("ERROR", "SOURCE")
    assert [s.name for s in sources] == ["NONE", "LOADER", "AGCU", "WATCHDOG", "UNIT",
                                         "REQUEST", "STUCK", "ABORTED"]
    # one WINDOWk_BASE / _SIZE pair and a READ and WRITE bit per window the AGCUs check
    from hdl.agcu_engines import DMA_WINDOWS
    names = {register.name for register in regmap.registers}
    assert {name for name in names if name.startswith("WINDOW") and name[6:7].isdigit()} == {
        f"WINDOW{k}_{part}" for k in range(DMA_WINDOWS) for part in ("BASE", "SIZE")}
    assert regmap["WINDOW_CTRL"].field("READ").width == DMA_WINDOWS
    assert regmap["WINDOW_CTRL"].field("WRITE").width == DMA_WINDOWS
    assert regmap["WINDOW_CTRL"].field("ENABLE").reset == 0
    # the gateware's enumeration (hdl.sequencer.ErrorSource) is the register's encoding
    from hdl.sequencer import ErrorSource
    assert [(s.name, s.value) for s in sources] == [(s.name, s.value) for s in ErrorSource]


def test_unsupported_field_semantics_are_refused(tmp_path):
    source = tmp_path / "bad.rdl"
    source.write_text("addrmap bad { reg { field { sw = w; hw = na; } X[0:0] = 0; } R @ 0; };")
    with pytest.raises(ValueError, match=r"Field bad\.R\.X has semantics the register file "
                                         r"does not implement \(sw=w, hw=na"):
        register_map(source, "bad")


def test_axi4lite_argument_checks():
    regmap = register_map()
    with pytest.raises(ValueError, match=r"^AXI4-Lite address width must be between 8 \(the "
                                         r"map's 172 bytes\) and 32, not 4$"):
        AXI4LiteRegisters(regmap, addr_width=4)
    with pytest.raises(TypeError, match=r"^AXI4-Lite address width must be an integer, "
                                        r"not '12'$"):
        AXI4LiteRegisters(regmap, addr_width="12")
    with pytest.raises(TypeError, match=r"^Register map must be a RegisterMap, not None$"):
        AXI4LiteRegisters(None)


# -- the register file in the Amaranth simulator ------------------------------------------

class _Lite:
    """An AXI4-Lite manager for the Amaranth simulator (one transaction at a time;
    ``w_first`` presents the data a cycle before the address)."""

    def __init__(self, ctx, dut):
        self.ctx, self.dut = ctx, dut

    async def write(self, address, data, strb=0xF, w_first=False):
        ctx, dut = self.ctx, self.dut
        ctx.set(dut.wdata, data)
        ctx.set(dut.wstrb, strb)
        ctx.set(dut.wvalid, 1)
        if w_first:
            await ctx.tick()
        ctx.set(dut.awaddr, address)
        ctx.set(dut.awvalid, 1)
        aw_done = w_done = False
        for _ in range(20):
            aw_ready, w_ready = ctx.get(dut.awready), ctx.get(dut.wready)
            await ctx.tick()
            if aw_ready and not aw_done:
                aw_done = True
                ctx.set(dut.awvalid, 0)
            if w_ready and not w_done:
                w_done = True
                ctx.set(dut.wvalid, 0)
            if aw_done and w_done:
                break
        ctx.set(dut.bready, 1)
        for _ in range(20):
            if ctx.get(dut.bvalid):
                resp = ctx.get(dut.bresp)
                await ctx.tick()
                ctx.set(dut.bready, 0)
                return resp
            await ctx.tick()
        raise AssertionError(f"no write response at {address:#x}")

    async def read(self, address):
        ctx, dut = self.ctx, self.dut
        ctx.set(dut.araddr, address)
        ctx.set(dut.arvalid, 1)
        for _ in range(20):
            ready = ctx.get(dut.arready)
            await ctx.tick()
            if ready:
                break
        ctx.set(dut.arvalid, 0)
        ctx.set(dut.rready, 1)
        for _ in range(20):
            if ctx.get(dut.rvalid):
                data, resp = ctx.get(dut.rdata), ctx.get(dut.rresp)
                await ctx.tick()
                ctx.set(dut.rready, 0)
                assert resp == 0
                return data
            await ctx.tick()
        raise AssertionError(f"no read data at {address:#x}")


def _simulate(body):
    regmap = register_map()
    dut = AXI4LiteRegisters(regmap)
    sim = Simulator(dut)
    sim.add_clock(1e-6)
    seen = {}

    async def bench(ctx):
        await body(ctx, dut, _Lite(ctx, dut), regmap, seen)
    sim.add_testbench(bench)
    sim.run()
    return seen


def test_register_file_reset_values_and_read_only():
    """Every register reads its reset value (status inputs held at 0); a write to a
    read-only register is answered OKAY and changes nothing; an unmapped word reads 0."""
    async def body(ctx, dut, lite, regmap, seen):
        for register in regmap.registers:
            assert await lite.read(register.offset) == register.reset, register.name
        assert await lite.write(regmap["ID"].offset, 0x1234) == 0
        assert await lite.read(regmap["ID"].offset) == MAGIC
        ctx.set(dut.regs.geometry_rows, 3)
        ctx.set(dut.regs.geometry_lanes, 8)
        assert await lite.write(regmap["GEOMETRY"].offset, 0xFFFF_FFFF) == 0
        assert await lite.read(regmap["GEOMETRY"].offset) == 3 | 8 << 16
        for unmapped in (0x4C, 0x6C, 0xAC, 0xFFC):
            assert await lite.write(unmapped, 0xFFFF_FFFF) == 0
            assert await lite.read(unmapped) == 0
        seen["ok"] = True
    assert _simulate(body)["ok"]


def test_register_file_writes_strobes_pulses_and_sticky_bits():
    async def body(ctx, dut, lite, regmap, seen):
        regs = dut.regs
        prog = regmap["PROG_ADDR"].offset
        assert await lite.write(prog, 0x1122_3344) == 0
        assert ctx.get(regs.prog_addr_addr) == 0x1122_3344
        await lite.write(prog, 0xAABB_CCDD, strb=0b0101)          # bytes 0 and 2
        assert await lite.read(prog) == 0x11BB_33DD
        await lite.write(regmap["SCRATCH"].offset, 0xCAFE_F00D, w_first=True)
        assert await lite.read(regmap["SCRATCH"].offset) == 0xCAFE_F00D
        # CONTROL.START: one cycle high, reads 0; IRQ_ENABLE is a plain bit
        control = regmap["CONTROL"].offset
        pulses = 0
        ctx.set(dut.awaddr, control)
        ctx.set(dut.awvalid, 1)
        ctx.set(dut.wdata, 0b101)
        ctx.set(dut.wstrb, 0xF)
        ctx.set(dut.wvalid, 1)
        ctx.set(dut.bready, 1)
        for _ in range(6):
            await ctx.tick()
            ctx.set(dut.awvalid, 0)
            ctx.set(dut.wvalid, 0)
            pulses += ctx.get(regs.control_start)
        ctx.set(dut.bready, 0)
        assert pulses == 1
        assert await lite.read(control) == 0b100
        assert ctx.get(regs.control_irq_enable) == 1
        # IRQ_STATUS: set by the hardware, cleared by writing 1 (0 leaves it)
        irq = regmap["IRQ_STATUS"].offset
        ctx.set(regs.irq_status_error_set, 1)
        await ctx.tick()
        ctx.set(regs.irq_status_error_set, 0)
        assert await lite.read(irq) == 0b10
        await lite.write(irq, 0b01)
        assert await lite.read(irq) == 0b10
        await lite.write(irq, 0b10)
        assert await lite.read(irq) == 0
        ctx.set(regs.irq_status_done_set, 1)
        await ctx.tick()
        ctx.set(regs.irq_status_done_set, 0)
        ctx.set(regs.clear_sticky, 1)
        await ctx.tick()
        ctx.set(regs.clear_sticky, 0)
        assert await lite.read(irq) == 0
        seen["ok"] = True
    assert _simulate(body)["ok"]


# -- the C header ---------------------------------------------------------------------------

def test_c_header_compiles_and_matches_the_map(tmp_path):
    """rdu_regs.h (peakrdl-cheader) compiles with gcc -Wall -Werror, and every register's
    offset in its struct and every field's position and reset value are the map's (the
    gateware's: the Verilator test reads every register at these offsets)."""
    from rdu.apps.ip import encodings, write_header
    gcc = shutil.which("gcc") or shutil.which("cc")
    if gcc is None:
        pytest.skip("no C compiler")
    header = write_header(tmp_path / "rdu_regs.h")
    regmap = register_map()
    lines = ['#include <stdio.h>', '#include <stddef.h>', '#include "rdu_regs.h"',
             "int main(void) {"]
    expected = []
    for register in regmap.registers:
        lines.append(f'    printf("%zu\\n", offsetof(rdu_ip_t, {register.name}));')
        expected.append(register.offset)
        for field in register.fields:
            prefix = f"RDU_IP__{register.name}__{field.name}"
            lines.append(f'    printf("%lu\\n", (unsigned long){prefix}_bm);')
            expected.append(field.mask)
            if field.kind != "status":
                lines.append(f'    printf("%lu\\n", (unsigned long){prefix}_reset);')
                expected.append(field.reset)
    for register, field, values in encodings():
        for name, value in values.items():
            lines.append(f'    printf("%d\\n", RDU_IP__{register}__{field}__{name});')
            expected.append(value)
    lines += ["    return 0;", "}"]
    source = tmp_path / "offsets.c"
    source.write_text("\n".join(lines) + "\n")
    binary = tmp_path / "offsets"
    subprocess.run([gcc, "-Wall", "-Werror", "-std=c11", "-I", str(header.parent),
                    str(source), "-o", str(binary)], check=True)
    output = subprocess.run([str(binary)], capture_output=True, text=True, check=True).stdout
    assert [int(value) for value in output.split()] == expected


def test_register_doc_is_generated(tmp_path):
    """docs/ip_regs.md is what peakrdl-markdown writes from hdl/rdu_ip.rdl (regenerate
    it with ``rdu verilog --ip -o build/ip`` and copy rdu_regs.md)."""
    from pathlib import Path

    from rdu.apps.ip import write_register_doc
    generated = write_register_doc(tmp_path / "rdu_regs.md").read_text()
    committed = Path(__file__).resolve().parent.parent / "docs" / "ip_regs.md"
    assert committed.read_text() == generated


# -- the IP top's ports ------------------------------------------------------------------

def test_ip_ports_are_flat_vendor_names(tmp_path):
    """The Verilog of a small IP top names every AXI4 signal as vendor IP does
    (``m00_axi_awaddr``), has the full AXI4 set per AGCU, the AXI4-Lite port and irq,
    and passes ``verilator --lint-only``."""
    from rdu.sim.verilator import generate_verilog, lint_verilog

    from hdl.ip import RDUIP, axi4_manager_members
    from hdl.regmap import axi4lite_members
    ip = RDUIP(2, 2, 4, agcus=3, compute_unit=None, capacity_bytes=4096)
    text = generate_verilog(ip, "rdu_ip")
    (tmp_path / "rdu_ip.v").write_text(text)
    ok, report = lint_verilog(tmp_path / "rdu_ip.v", "rdu_ip")
    assert ok, report
    header = re.search(r"^module rdu_ip ?\(([^;]*)\);", text, re.M).group(1)
    ports = set(re.findall(r"\w+", header))
    expected = {"clk", "rst", "irq"}
    for k in range(3):
        expected |= {f"m{k:02d}_axi_{name}" for name in axi4_manager_members(32, 128, 4)}
    expected |= {f"s_axil_{name}" for name in axi4lite_members(12)}
    assert ports == expected
    for name in ("awlock", "awcache", "awprot", "awqos", "awregion", "arcache", "wstrb",
                 "bid", "rlast"):
        assert f"m02_axi_{name}" in ports
    with pytest.raises(ValueError, match=r"^AGCU count must be between 1 and 32, not 33$"):
        RDUIP(20, 2, 4, agcus=33, compute_unit=None)


def test_verilog_ip_command(tmp_path, capsys):
    """``rdu verilog --ip`` refuses a design that is not an IP top in one line (exit 2)."""
    from rdu.cli import main
    assert main(["verilog", "--ip", "pmu", "-o", str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip() == \
        "rdu verilog: error: --ip writes IP tops (ip_2x2), not 'pmu'"


# -- Verilator: a GEMM through the IP top, and the bad starts -------------------------------

@pytest.mark.verilator
def test_gemm_through_ip_verilator(sim_dir, seed):
    """A 16x16x16 GEMM on the 2x2 machine through the IP top, driven over AXI4-Lite by
    cocotbext-axi's AxiLiteMaster with memory behind cocotbext-axi AxiSlave models, all
    with random pauses on every channel: first four bad starts (no valid program: the
    loader's BAD_MAGIC; a program address answering DECERR, one answering SLVERR; an
    empty EXEC_MASK), each ending with the interrupt and a status that names the cause;
    then the GEMM, correct against numpy, the interrupt raised once, the counters read
    back; last a stalled GEMM (WATCHDOG), a start refused (STUCK), CONTROL.ABORT and the
    GEMM again, correct, with no reset. Every register is read once after reset at its
    map offset."""
    from rdu.frontend.gemm import (
        check_result,
        compile_gemm,
        pack_inputs,
        random_inputs,
        unpack_output,
    )
    from rdu.mapper import ArrayGeometry
    from rdu.sim.ip_host import run_ip_programs
    from rdu.sim.runner import run_verilator
    from rdu.sim.verilator import build

    from hdl.config_net import LoaderState
    from hdl.ip import RDUIP
    m = n = k = 16
    program = compile_gemm(m, n, k, ArrayGeometry(rows=2, cols=2, lanes=4, pmu_words=4096))
    a, b = random_inputs(m, n, k, seed)
    pack_inputs(program, a, b)
    dirs = [str(program.save(sim_dir / name)) for name in ("program", "again")]
    params = program.machine.system_params()
    built = build(RDUIP, toplevel="rdu_ip", **params)
    names = RDUIP(**params).perf_counter_names()
    hbm = program.machine.region("hbm")
    empty = hbm.base + hbm.size - 0x1_0000          # nothing written there: zeroes
    failing = 0xF000_0000                           # answers SLVERR
    words = len(program.bitstream)
    start = {"prog_addr": program.bitstream_address, "prog_len": 4 * words}
    bad = [{"prog_addr": empty, "prog_len": 4 * words, "exec_mask": 0b11},
           {"prog_addr": 0xE000_0000, "prog_len": 4 * words, "exec_mask": 0b11},
           {"prog_addr": failing, "prog_len": 4 * words, "exec_mask": 0b11},
           {"prog_addr": program.bitstream_address, "prog_len": 4 * words, "exec_mask": 0}]
    stats = run_verilator(built, run_ip_programs, sim_dir / "run", seed=seed, watchdog=20_000,
                          program_dirs=dirs, timeout=60_000,
                          pause=True, perf_counters=names, soft_reset=True,
                          error_regions=[[failing, 0x1000]], bad_programs=bad,
                          last_starts=[{**start, "exec_mask": 0b01, "watchdog": 300},
                                       {**start, "exec_mask": 0b11}],
                          abort_after_last=True)
    result = stats.result
    registers = result["registers"]
    regmap = register_map()
    # every register after reset, read at its map offset: the reset values of the map,
    # the machine's parameters, zero status
    reported = {"GEOMETRY": 2 | 2 << 8 | 4 << 16 | 4 << 24,
                "RESOURCES": 16 | 2 << 16 | 4 << 24, "PERF_COUNT": len(names)}
    assert registers == {r.name: reported.get(r.name, r.reset) for r in regmap.registers}
    assert registers["ID"] == MAGIC and registers["VERSION"] == 1 << 8 | 4
    assert registers["WATCHDOG"] == 0x10000
    # a write to a read-only register is ignored (OKAY), unmapped words read 0
    assert result["probes"] == {"id_write_resp": 0, "id_after_write": MAGIC,
                                "unmapped": [0, 0, 0]}
    messages = [refused["message"] for refused in result["refused"]]
    assert messages == [
        "bad start 0: bitstream rejected by the configuration loader: BAD_MAGIC "
        "(ERROR.CODE = 1)",
        "bad start 1: AGCU 0 ended with READ_DECERR (ERROR.CODE = 6)",
        "bad start 2: AGCU 0 ended with READ_SLVERR (ERROR.CODE = 5)",
        "bad start 3: REQUEST (ERROR = 0x500)"]
    assert all(r["irq_edges"] == 1 and r["busy"] == 0 for r in result["refused"])
    # the soft reset between the two launches: the sequencer's status, the loader and
    # the pending interrupts cleared, the run registers kept
    assert result["after_soft_reset"] == [{"STATUS": 0, "IRQ_STATUS": 0,
                                           "PROG_ADDR": program.bitstream_address}]
    for launch in result["launches"]:
        with np.load(launch["outputs_file"]) as out:
            c = unpack_output(program, out["c"])
        ok, error = check_result(c, a, b)
        assert ok, f"C differs from numpy by {error}"
        assert launch["irq_edges"] == 1 and launch["irq_after_clear"] == 0
        assert launch["cycles"] > 0 and launch["load_cycles"] > 0
        assert launch["array_cycles"] > 0
        assert set(launch["perf"]) == set(names)
        assert not any(v for name, v in launch["perf"].items() if name.endswith(".error"))
    # last: the GEMM with only AGCU 0 executing (nobody takes C): the array's watchdog
    # stops it, naming the stalled switch input; the next start is refused (STUCK)
    last = result["refused_last"]
    assert re.fullmatch(r"last start 0: hardware watchdog stopped the run; first stalled: "
                        r"switch\(\d,\d\) \w+ input \w+ \(ERROR_UNIT = 0x[0-9a-f]+\)",
                        last[0]["message"]), last[0]["message"]
    assert last[1]["message"] == ("last start 1: AGCU 0 still busy from an earlier run "
                                  "(write CONTROL.ABORT first)")
    assert all(r["irq_edges"] == 1 and r["busy"] == 0 for r in last)
    # CONTROL.ABORT drains AGCU 0 and flushes the array: nothing busy, the loader EMPTY
    # (STATUS.ERROR still tells of the refused start),
    # and the GEMM runs again, correct, with no reset
    status = result["abort"]["STATUS"]
    fields = {field.name: (status & field.mask) >> field.lsb
              for field in regmap["STATUS"].fields}
    assert {name: fields[name] for name in ("CONFIG_STATE", "BUSY", "RUNNING", "ABORTING",
                                            "AGCU_BUSY")} == {
        "CONFIG_STATE": LoaderState.EMPTY, "BUSY": 0, "RUNNING": 0, "ABORTING": 0,
        "AGCU_BUSY": 0}, result["abort"]
    with np.load(result["after_abort"]["outputs_file"]) as out:
        ok, error = check_result(unpack_output(program, out["c"]), a, b)
    assert ok, f"C after the abort differs from numpy by {error}"
    launch = result["launches"][0]
    print(f"GEMM {m}x{n}x{k} through the IP top (paused AXI): load {launch['load_cycles']}, "
          f"run {launch['cycles']} cycles, array {launch['array_cycles']}; "
          f"{stats.cycles} cycles in {stats.seconds:.1f} s")


# -- the sequencer against stand-in AGCUs (Amaranth simulator) ---------------------------

class _FakeAGCU:
    """Gateware stand-in of an AGCU's command side: takes a command when idle, is busy
    for ``latency`` cycles, then done, an ``EXECUTE`` with ``next_error`` (both signals
    set by the test)."""

    def __init__(self):
        from amaranth import Signal
        from amaranth.lib import stream

        from hdl.agcu import agcu_command_layout
        self.cmd = stream.Signature(agcu_command_layout()).flip().create()
        self.busy, self.done = Signal(), Signal()
        self.error, self.next_error = Signal(4), Signal(4)
        self.latency, self.count = Signal(16, init=5), Signal(16)
        self.ops = Signal(3)         # the last accepted op

    def elaborate(self, m):
        from amaranth import Mux

        from hdl.agcu import AGCUOp
        m.d.comb += self.cmd.ready.eq(~self.busy)
        with m.If(self.cmd.valid & self.cmd.ready):
            m.d.sync += [self.busy.eq(1), self.done.eq(0), self.count.eq(self.latency),
                         self.ops.eq(self.cmd.payload.op)]
        with m.Elif(self.busy):
            with m.If(self.count == 0):
                m.d.sync += [self.busy.eq(0), self.done.eq(1),
                             self.error.eq(Mux(self.ops == AGCUOp.EXECUTE, self.next_error, 0))]
            with m.Else():
                m.d.sync += self.count.eq(self.count - 1)


def test_sequencer_against_stand_in_agcus():
    """Every way a run ends: clean (START and both EXECUTEs on one edge, RUN_CYCLES as
    the host runtime counts), an AGCU error while the other is still busy (at once,
    naming it), a start refused while an AGCU is still busy (STUCK), the array's
    watchdog (naming host.watchdog_unit), a unit error after the drain, a rejected
    bitstream, a bad EXEC_MASK; the argument load on AGCU 0 before EXECUTE; a start
    while busy is ignored; an abort ends a running sequence at once (ABORTED)."""
    from amaranth import Module

    from hdl.agcu import AGCUError, AGCUOp
    from hdl.config_net import ConfigStatus, LoaderState
    from hdl.ip import Sequencer
    seq = Sequencer(2)
    fakes = [_FakeAGCU(), _FakeAGCU()]
    m = Module()
    m.submodules.seq = seq
    for k, fake in enumerate(fakes):
        fake.elaborate(m)
        m.d.comb += [fake.cmd.valid.eq(seq.cmd[k].valid), fake.cmd.payload.eq(seq.cmd[k].payload),
                     seq.cmd[k].ready.eq(fake.cmd.ready), seq.agcu_busy[k].eq(fake.busy),
                     seq.agcu_done[k].eq(fake.done), seq.agcu_error[k].eq(fake.error)]
    sources = register_map().enum("ERROR", "SOURCE")
    sim = Simulator(m)
    sim.add_clock(1e-6)
    log = {}

    async def run(ctx, what, until=400):
        """Pulse start; return (cycles to the end, [cycles with host.start],
        {cycle: set of AGCUs sent EXECUTE})."""
        ctx.set(seq.start, 1)
        await ctx.tick()
        ctx.set(seq.start, 0)
        starts, executes = [], {}
        for cycle in range(until):
            if ctx.get(seq.host.start):
                starts.append(cycle)
            for k in range(2):
                if ctx.get(seq.cmd[k].valid) and ctx.get(seq.cmd[k].ready) and \
                        ctx.get(seq.cmd[k].payload.op) == AGCUOp.EXECUTE:
                    executes.setdefault(cycle, set()).add(k)
            await ctx.tick()
            if not ctx.get(seq.busy):
                log[what] = (ctx.get(seq.done), ctx.get(seq.error), ctx.get(seq.error_source),
                             ctx.get(seq.error_code), ctx.get(seq.error_unit))
                return cycle, starts, executes
        raise AssertionError(f"{what}: still busy after {until} cycles")

    async def bench(ctx):
        ctx.set(seq.prog_addr, 0x3000)
        ctx.set(seq.prog_len, 700)
        ctx.set(seq.exec_mask, 0b11)
        ctx.set(seq.watchdog_cycles, 100)
        ctx.set(seq.host.config_state, LoaderState.LOADED)
        # a clean run: both EXECUTEs on the edge that samples start
        ctx.set(fakes[1].latency, 20)
        _, starts, executes = await run(ctx, "clean")
        assert len(starts) == 1 and executes == {starts[0]: {0, 1}}
        assert log["clean"] == (1, 0, sources.NONE, 0, 0)
        assert ctx.get(seq.run_cycles) == 21         # latency 20: done 21 edges after start
        assert ctx.get(fakes[0].ops) == AGCUOp.EXECUTE
        # a start while busy is ignored; an AGCU error ends the run at once
        ctx.set(fakes[1].latency, 1000)
        ctx.set(fakes[0].next_error, AGCUError.WRITE_SLVERR)
        ctx.set(seq.start, 1)
        await ctx.tick()
        ctx.set(seq.start, 0)
        await ctx.tick()
        await ctx.tick()
        cycles, _, _ = await run(ctx, "agcu error")      # this start is ignored...
        assert cycles < 60                               # ...the first one ends
        assert log["agcu error"] == (0, 1, sources.AGCU, AGCUError.WRITE_SLVERR, 0)
        # AGCU 1 is still busy: a start is refused at once (no command would be taken)
        cycles, _, _ = await run(ctx, "stuck")
        assert cycles < 3 and log["stuck"] == (0, 1, sources.STUCK, 0, 1)
        for _ in range(1100):                            # AGCU 1 finishes its EXECUTE
            await ctx.tick()
        ctx.set(fakes[0].next_error, 0)
        ctx.set(fakes[1].latency, 5)
        # the array's watchdog
        ctx.set(seq.host.watchdog, 1)
        ctx.set(seq.host.watchdog_unit, 0x123)
        await run(ctx, "watchdog")
        assert log["watchdog"] == (0, 1, sources.WATCHDOG, 0, 0x123)
        ctx.set(seq.host.watchdog, 0)
        for _ in range(10):                 # the AGCUs the watchdog left busy finish
            await ctx.tick()
        # a unit error seen after the drain
        ctx.set(seq.host.unit_error, 1)
        await run(ctx, "unit")
        assert log["unit"] == (0, 1, sources.UNIT, 0, 0)
        ctx.set(seq.host.unit_error, 0)
        # a rejected bitstream
        ctx.set(seq.host.config_state, LoaderState.ERROR)
        ctx.set(seq.host.error, ConfigStatus.CRC)
        await run(ctx, "loader")
        assert log["loader"] == (0, 1, sources.LOADER, ConfigStatus.CRC, 0)
        ctx.set(seq.host.config_state, LoaderState.LOADED)
        # EXEC_MASK naming AGCU 2 of 2
        ctx.set(seq.exec_mask, 0b100)
        await run(ctx, "mask")
        assert log["mask"] == (0, 1, sources.REQUEST, 0, 0)
        # arguments: ARGUMENT_LOAD on AGCU 0, start with AGCU 1's EXECUTE, AGCU 0's after
        ctx.set(seq.exec_mask, 0b11)
        ctx.set(seq.arg_len, 8)
        ctx.set(fakes[0].latency, 10)
        _, starts, executes = await run(ctx, "args")
        assert log["args"][:2] == (1, 0)
        assert executes[starts[0]] == {1}
        assert [k for cycle, ks in executes.items() if cycle > starts[0] for k in ks] == [0]
        # an abort while AGCU 1 runs ends the run at once with ABORTED
        ctx.set(seq.arg_len, 0)
        ctx.set(fakes[1].latency, 1000)
        for _ in range(20):                 # AGCU 0's EXECUTE of the run above ends
            await ctx.tick()
        ctx.set(seq.start, 1)
        await ctx.tick()
        ctx.set(seq.start, 0)
        for _ in range(10):
            await ctx.tick()
        assert ctx.get(seq.busy)
        ctx.set(seq.abort_start, 1)
        cycles, _, _ = await run(ctx, "aborted")   # (this start is ignored: busy)
        ctx.set(seq.abort_start, 0)
        assert cycles < 2 and log["aborted"] == (0, 1, sources.ABORTED, 0, 0)
    sim.add_testbench(bench)
    sim.run()
    assert len(log) == 9


@pytest.mark.verilator
def test_run_command_sim_ip_verilator(capsys):
    """The product path: ``rdu run linear_relu ... --sim ip`` (rdu.runtime's ``ip`` back
    end) compiles another kernel for the 2x2 machine, runs it through the IP top and
    checks it against numpy (exit 0); the report carries the IP's cycle counters."""
    import json

    from rdu.cli import main
    code = main(["run", "linear_relu", "--m", "20", "--n", "12", "--k", "9", "--rows", "2",
                 "--cols", "2", "--lanes", "4", "--pmu-kib", "16", "--sim", "ip", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0 and report["ok"] and report["sim"] == "ip"
    assert report["cycles"] > 0 and report["config_cycles"] > 0


@pytest.mark.verilator
def test_program_sequence_through_ip_verilator(tmp_path):
    """Two different kernels in sequence through the IP top on one memory
    (``rdu.runtime.run_programs(..., sim="ip")``): a GEMM, then ``relu(A B + bias)``;
    each checked against numpy, each its own interrupt and counters."""
    from rdu.frontend.kernels import get_kernel
    from rdu.machine import Machine
    from rdu.runtime import run_programs
    machine = Machine(rows=2, cols=2, lanes=4, pmu_bytes=16384)
    jobs = [(get_kernel("gemm"), {"m": 24, "n": 16, "k": 20}),
            (get_kernel("linear_relu"), {"m": 20, "n": 12, "k": 9})]
    programs, inputs = [], []
    for seed, (kernel, params) in enumerate(jobs, start=3):
        program = kernel.compile(machine, **params)
        inputs.append(kernel.random_inputs(program, seed))
        kernel.pack(program, inputs[-1])
        programs.append(program)
    results = run_programs(programs, "ip", seed=1, work_dir=tmp_path / "run")
    for (kernel, _), program, data, result in zip(jobs, programs, inputs, results, strict=True):
        ok, error = kernel.check(program, data, kernel.unpack(program, result.outputs))
        assert ok, f"{program.name} differs from numpy by {error}"
        assert result.sim == "ip" and result.cycles > 0 and result.load_cycles > 0
        assert result.counters["irq_edges"] == 1 and result.counters["perf"]
