"""A CPU's driver of the IP top (:class:`hdl.ip.RDUIP`), on third-party AXI models.

What software on a soft CPU or a Zynq does with the IP block, under cocotb +
Verilator: the memory images are written into the memory behind the AXI4 manager
ports, the registers are programmed over AXI4-Lite (``PROG_ADDR``, ``PROG_LEN``,
``EXEC_MASK``, ``WATCHDOG``, ``CONTROL``), the driver waits for the interrupt, reads
``STATUS``, ``ERROR``, the cycle counters and every performance counter, clears
``IRQ_STATUS`` and reads the outputs.

The bus models are cocotbext-axi's, not this project's: ``AxiLiteMaster`` is the CPU,
and every ``m<kk>_axi`` port is an ``AxiSlave`` on one shared ``AddressSpace`` holding
HBM, DDR and the host window at the machine's bases (``SparseMemoryRegion`` s). So a
third-party model checks the IP's bus behaviour on every run (cocotbext-axi asserts
that no burst crosses 4 KiB, that ``WLAST`` sits on the last beat, that ``AxSIZE``
fits the bus). ``pause=True`` adds random pauses on every channel of every port, the
CPU's included. An access outside every region is answered ``DECERR`` (cocotbext-axi
answers ``SLVERR`` for every failed access; :class:`_DecodingTarget` tells the two
apart), an access to a region added with ``error_regions`` ``SLVERR``.

:func:`run_ip_programs` is a :class:`rdu.sim.bench.Bench` body for the cocotb tier
only (it drives the design's ports through cocotb, not through the bench's agents).
"""

import random
from pathlib import Path

import numpy as np

from hdl.agcu import AGCUError
from hdl.agcu_engines import DMA_WINDOWS
from hdl.array import watchdog_location
from hdl.ip import ERROR_CODES
from hdl.orchestrator import DEFAULT_COMMANDS
from hdl.regmap import register_map

from ..program import Program
from ..schedule import decode, error_message
from ..units.agcu import check_position
from .host import RunError, check_program, code_name, unit_errors
from .limits import hardware_watchdog_cycles
from .protocol import OrchestrationPlan

__all__ = ["IPDriver", "run_ip_programs", "run_ip_schedule", "ip_params"]

WORD_BYTES = 4
#: Written over every output before a launch (then its inputs, which may overlap).
POISON = 0xDEADBEEF


def ip_params(machine):
    """Constructor arguments of the :class:`hdl.ip.RDUIP` of ``machine``."""
    return machine.system_params()


class _DecodeError(Exception):
    pass


class _DecodingTarget:
    """One port's view of the shared address space: remembers whether the last failed
    access missed every region (``DECERR``) or hit a region that failed (``SLVERR``)."""

    def __init__(self, space, regions):
        self.space, self.regions = space, regions
        self.read_decode_error = False
        self.write_decode_error = False

    def _mapped(self, address, length):
        return any(base <= address and address + length <= base + size
                   for base, size in self.regions)

    async def read(self, address, length, **kwargs):
        if not self._mapped(address, length):
            self.read_decode_error = True
            raise _DecodeError(f"read of {length} bytes at {address:#x}")
        return await self.space.read(address, length, **kwargs)

    async def write(self, address, data, **kwargs):
        if not self._mapped(address, len(data)):
            self.write_decode_error = True
            raise _DecodeError(f"write of {len(data)} bytes at {address:#x}")
        return await self.space.write(address, data, **kwargs)


def _pauses(rng, probability):
    while True:
        yield rng.random() < probability


class IPDriver:
    """The CPU side of one :class:`hdl.ip.RDUIP` under cocotb.

    Parameters
    ----------
    bench : rdu.sim.cocotb_bench.CocotbBench
    machine : rdu.machine.Machine
    pause : bool
        Random pauses (probability ``pause_probability``) on every AXI4 and AXI4-Lite
        channel, seeded from the bench's seed.
    error_regions : list of (base, size)
        Extra regions whose every access fails (answered ``SLVERR``).
    perf_counters : list of str
        Names of the performance counters in ``PERF_SELECT`` order.
    """

    def __init__(self, bench, machine, *, pause=False, pause_probability=0.3,
                 error_regions=(), perf_counters=()):
        import cocotb
        from cocotbext.axi import (
            AddressSpace,
            AxiBus,
            AxiLiteBus,
            AxiLiteMaster,
            AxiResp,
            AxiSlave,
            SparseMemoryRegion,
        )
        from cocotbext.axi.address_space import Region

        class FailingRegion(Region):
            async def _read(self, address, length, **kwargs):
                raise OSError(f"failing region: read at {address:#x}")

            async def _write(self, address, data, **kwargs):
                raise OSError(f"failing region: write at {address:#x}")

        self.bench, self.machine = bench, machine
        dut = self.dut = bench.dut
        self.regmap = register_map()
        self.perf_counters = list(perf_counters)
        self.space = AddressSpace(2 ** 32)
        regions = []
        for region in machine.regions():
            self.space.register_region(SparseMemoryRegion(region.size), region.base)
            regions.append((region.base, region.size))
        for base, size in error_regions:
            self.space.register_region(FailingRegion(size), base)
            regions.append((base, size))
        rng = random.Random(bench.seed)
        self.ports = []
        for k in range(machine.agcus):
            target = _DecodingTarget(self.space, regions)
            slave = AxiSlave(AxiBus.from_prefix(dut, f"m{k:02d}_axi"), dut.clk, dut.rst,
                             target=target)
            self._decerr(slave, target, AxiResp)
            self.ports.append(slave)
            if pause:
                for channel in (slave.write_if.aw_channel, slave.write_if.w_channel,
                                slave.write_if.b_channel, slave.read_if.ar_channel,
                                slave.read_if.r_channel):
                    channel.set_pause_generator(_pauses(random.Random(rng.random()),
                                                        pause_probability))
        self.lite = AxiLiteMaster(AxiLiteBus.from_prefix(dut, "s_axil"), dut.clk, dut.rst)
        if pause:
            for channel in (self.lite.write_if.aw_channel, self.lite.write_if.w_channel,
                            self.lite.write_if.b_channel, self.lite.read_if.ar_channel,
                            self.lite.read_if.r_channel):
                channel.set_pause_generator(_pauses(random.Random(rng.random()),
                                                    pause_probability))
        self.irq_edges = 0
        cocotb.start_soon(self._count_irq())

    @staticmethod
    def _decerr(slave, target, resp):
        """Answer DECERR instead of cocotbext-axi's SLVERR when the access missed every
        region (the response is sent right after the failed access: reads per beat,
        writes per burst)."""
        send_r, send_b = slave.read_if.r_channel.send, slave.write_if.b_channel.send

        async def r(transaction):
            if target.read_decode_error:
                transaction.rresp = resp.DECERR
                target.read_decode_error = False
            await send_r(transaction)

        async def b(transaction):
            if target.write_decode_error:
                transaction.bresp = resp.DECERR
                target.write_decode_error = False
            await send_b(transaction)
        slave.read_if.r_channel.send = r
        slave.write_if.b_channel.send = b

    async def _count_irq(self):
        from cocotb.triggers import RisingEdge
        while True:
            await RisingEdge(self.dut.irq)
            self.irq_edges += 1

    # -- registers -------------------------------------------------------------------------
    async def write_reg(self, name, value):
        """Write register ``name`` over AXI4-Lite; returns the response code."""
        offset = self.regmap[name].offset
        response = await self.lite.write(offset, int(value).to_bytes(4, "little"))
        return int(response.resp)

    async def read_reg(self, name):
        return await self.read_offset(self.regmap[name].offset)

    async def read_offset(self, offset):
        response = await self.lite.read(offset, 4)
        return int.from_bytes(response.data, "little")

    def field(self, register, field, value):
        """Field ``field`` of register ``register`` in the word ``value``."""
        f = self.regmap[register].field(field)
        return (value >> f.lsb) & ((1 << f.width) - 1)

    def bits(self, register, **fields):
        """The word with the named fields of ``register`` set."""
        word = 0
        for name, value in fields.items():
            f = self.regmap[register].field(name)
            word |= (int(value) & ((1 << f.width) - 1)) << f.lsb
        return word

    async def clear_irq(self):
        """Clear every pending interrupt (write 1 to every ``IRQ_STATUS`` field)."""
        await self.write_reg("IRQ_STATUS", sum(f.mask for f in self.regmap["IRQ_STATUS"].fields))

    # -- memory ----------------------------------------------------------------------------
    async def write(self, address, words):
        await self.space.write(address, np.asarray(words, dtype="<u4").tobytes())

    async def read(self, address, count):
        data = await self.space.read(address, WORD_BYTES * count)
        return np.frombuffer(data, dtype="<u4").copy()

    # -- a run -----------------------------------------------------------------------------
    async def read_counters(self):
        values = {}
        for index, name in enumerate(self.perf_counters):
            await self.write_reg("PERF_SELECT", index)
            values[name] = await self.read_reg("PERF_VALUE")
        return values

    async def start(self, *, prog_addr, prog_len, exec_mask, watchdog=None, arg_addr=0,
                    arg_len=0):
        """Program the run registers and write ``CONTROL.START`` (with the interrupt
        enabled)."""
        await self.write_reg("PROG_ADDR", prog_addr)
        await self.write_reg("PROG_LEN", prog_len)
        await self.write_reg("EXEC_MASK", exec_mask)
        await self.write_reg("ARG_ADDR", arg_addr)
        await self.write_reg("ARG_LEN", arg_len)
        if watchdog is not None:
            await self.write_reg("WATCHDOG", watchdog)
        await self.write_reg("CONTROL", self.bits("CONTROL", START=1, IRQ_ENABLE=1))

    async def set_windows(self, windows, enable=True):
        """Program the memory windows ``[(base, size, read, write)]`` (``WINDOW_CTRL``,
        ``WINDOWk_BASE``/``_SIZE``; at most :data:`hdl.agcu_engines.DMA_WINDOWS`), or
        turn them off (``enable`` False)."""
        if len(windows) > DMA_WINDOWS:
            raise RunError(f"{len(windows)} memory windows, the AGCUs check {DMA_WINDOWS}")
        read = write = 0
        for k, (base, size, can_read, can_write) in enumerate(windows):
            await self.write_reg(f"WINDOW{k}_BASE", base)
            await self.write_reg(f"WINDOW{k}_SIZE", size)
            read |= bool(can_read) << k
            write |= bool(can_write) << k
        await self.write_reg("WINDOW_CTRL", self.bits("WINDOW_CTRL", ENABLE=int(enable),
                                                       READ=read, WRITE=write))

    async def abort(self, polls=1000):
        """Write ``CONTROL.ABORT`` (the busy AGCUs drain, the array is flushed) and poll
        ``STATUS`` until ``ABORTING`` and ``AGCU_BUSY`` are low; return the note a
        run's message carries. Raises :class:`RunError` after ``polls`` reads."""
        await self.write_reg("CONTROL", self.bits("CONTROL", ABORT=1, IRQ_ENABLE=1))
        for _ in range(polls):
            status = await self.read_reg("STATUS")
            if not (self.field("STATUS", "ABORTING", status) or
                    self.field("STATUS", "AGCU_BUSY", status)):
                return "aborted (CONTROL.ABORT): AGCUs drained, array flushed"
        raise RunError(f"CONTROL.ABORT: still aborting after {polls} STATUS reads "
                       f"(STATUS = {status:#x}; write CONTROL.SOFT_RESET)")

    async def wait_irq(self, timeout, what):
        """Wait for ``irq`` (at most ``timeout`` cycles); raise :class:`RunError`."""
        from cocotb.triggers import ClockCycles, First, RisingEdge
        if int(self.dut.irq.value):
            return
        edge = RisingEdge(self.dut.irq)
        fired = await First(edge, ClockCycles(self.dut.clk, timeout))
        if fired is not edge and not int(self.dut.irq.value):
            status = await self.read_reg("STATUS")
            raise RunError(f"{what}: no interrupt after {timeout} cycles (STATUS = "
                           f"{status:#x}, BUSY = {self.field('STATUS', 'BUSY', status)})")

    async def error_message(self, what):
        """The one-line message of ``ERROR``/``ERROR_UNIT`` after a failed run."""
        error = await self.read_reg("ERROR")
        unit = await self.read_reg("ERROR_UNIT")
        sources = self.regmap.enum("ERROR", "SOURCE")
        source = sources(self.field("ERROR", "SOURCE", error))
        code = self.field("ERROR", "CODE", error)
        codes = ERROR_CODES.get(source.name)
        name = code_name(codes, code) if codes else None
        if source == sources.LOADER:
            return (f"{what}: bitstream rejected by the configuration loader: {name} "
                    f"(ERROR.CODE = {code})")
        if source == sources.AGCU:
            where = ""
            if code == AGCUError.WINDOW:
                where = f" at {await self.read_reg('ERROR_ADDR'):#x} (outside its windows)"
            return f"{what}: AGCU {unit} ended with {name}{where} (ERROR.CODE = {code})"
        if source == sources.WATCHDOG:
            where = watchdog_location(unit, self.machine.rows, self.machine.cols)
            return (f"{what}: hardware watchdog stopped the run; first stalled: "
                    f"{where or 'no item in the mesh'} (ERROR_UNIT = {unit:#x})")
        if source == sources.STUCK:
            return (f"{what}: AGCU {unit} still busy from an earlier run (write "
                    f"CONTROL.ABORT first)")
        if source == sources.UNIT:
            errors = unit_errors(await self.read_counters())
            return f"{what}: {errors[0] if errors else 'a unit reports an error'}"
        return f"{what}: {source.name} (ERROR = {error:#x})"

    async def run(self, program, *, timeout=200_000, load_timeout=100_000, outputs_file=None,
                  watchdog=None, windows=False):
        """One launch of ``program`` as a CPU driver runs it; returns its figures.
        ``windows``: confine it to the memory windows of its manifest
        (:meth:`rdu.program.Program.dma_windows`)."""
        check_program(program)
        if windows:
            await self.set_windows(program.dma_windows(DMA_WINDOWS))
        what = f"program {program.name!r}"
        for address, words in program.outputs.values():
            # what an earlier launch left there must not pass for this one's result
            await self.write(address, np.full(words, POISON, dtype=np.uint32))
        for address, words in program.inputs.values():
            if words is not None:
                await self.write(address, words)
        await self.write(program.bitstream_address, program.bitstream)
        await self.clear_irq()
        edges = self.irq_edges
        mask = sum(1 << k for k in program.execute)
        await self.start(prog_addr=program.bitstream_address,
                         prog_len=WORD_BYTES * len(program.bitstream), exec_mask=mask,
                         watchdog=watchdog)
        await self.wait_irq(timeout + load_timeout, what)
        status = await self.read_reg("STATUS")
        pending = await self.read_reg("IRQ_STATUS")
        if self.field("STATUS", "ERROR", status):
            message = await self.error_message(what)
            if self.field("STATUS", "AGCU_BUSY", await self.read_reg("STATUS")):
                message += f"; {await self.abort()}"
            raise RunError(message)
        if not (self.field("STATUS", "DONE", status) and
                self.field("IRQ_STATUS", "DONE", pending)):
            raise RunError(f"{what}: interrupt without DONE or ERROR (STATUS = {status:#x}, "
                           f"IRQ_STATUS = {pending:#x})")
        figures = {"cycles": await self.read_reg("RUN_CYCLES"),
                   "load_cycles": await self.read_reg("LOAD_CYCLES"),
                   "array_cycles": await self.read_reg("CYCLES")}
        perf = await self.read_counters()
        await self.write_reg("IRQ_STATUS", pending)
        irq_after_clear = int(self.dut.irq.value)
        outputs = {name: await self.read(address, words)
                   for name, (address, words) in program.outputs.items()}
        if outputs_file:
            np.savez(outputs_file, **outputs)
        return {"program": program.name, **figures, "perf": perf,
                "irq_edges": self.irq_edges - edges, "irq_after_clear": irq_after_clear,
                "outputs_file": str(outputs_file) if outputs_file else None}


async def run_ip_programs(bench, program_dirs, *, timeouts=None, timeout=200_000, pause=False,
                          perf_counters=None, watchdog=None, error_regions=(),
                          bad_programs=None, soft_reset=False, last_starts=None,
                          abort_after_last=False, windows=False, position=0):
    """Run the saved programs in order on the IP top through its AXI4-Lite registers
    (:class:`IPDriver`); each launch's outputs go to ``<program_dir>/outputs.npz``.

    ``bad_programs``: ``[{"prog_addr", "prog_len", "exec_mask"}]`` started first (each
    must end with the interrupt and ``STATUS.ERROR``); their error messages are returned
    in ``"refused"``. ``soft_reset``: write ``CONTROL.SOFT_RESET`` before every launch
    after the first, and record ``STATUS``, ``IRQ_STATUS`` and ``PROG_ADDR`` right after
    it (``"after_soft_reset"``). Returns ``{"launches": [...], "refused": [...],
    "registers": {name: value after reset}, "probes": {...}, "after_soft_reset":
    [...]}``; the probes are a write to ``ID`` then its read (``id_after_write``) and
    reads of unmapped words (``unmapped``). ``last_starts``: like ``bad_programs``
    (``"watchdog"`` too), started after the launches (their messages in
    ``"refused_last"``). ``abort_after_last``: then ``CONTROL.ABORT`` (its note and
    ``STATUS`` after it in ``"abort"``) and the first program once more, with no reset
    (``"after_abort"``: its launch). ``windows``: each launch confined to its manifest's
    memory windows. ``position``: written to ``POSITION`` before each launch (a soft reset
    clears it, an earlier run may have left another).
    """
    programs = [Program.load(directory) for directory in program_dirs]
    if not programs:
        raise RunError("no program to run")
    machine = programs[0].machine
    driver = IPDriver(bench, machine, pause=pause, perf_counters=perf_counters or (),
                      error_regions=[tuple(r) for r in error_regions])
    registers = {register.name: await driver.read_reg(register.name)
                 for register in driver.regmap.registers}
    probes = {"id_write_resp": await driver.write_reg("ID", 0),
              "id_after_write": await driver.read_reg("ID"),
              "unmapped": [await driver.read_offset(offset) for offset in (0x4C, 0x6C, 0xFFC)]}

    async def refuse(starts, name):
        refused = []
        for index, bad in enumerate(starts or ()):
            what = f"{name} {index}"
            await driver.clear_irq()
            edges = driver.irq_edges
            await driver.start(**{"watchdog": watchdog, **bad})
            await driver.wait_irq(timeout, what)
            status = await driver.read_reg("STATUS")
            if not driver.field("STATUS", "ERROR", status):
                raise RunError(f"{what}: ended without STATUS.ERROR (STATUS = {status:#x})")
            refused.append({"message": await driver.error_message(what),
                            "irq_edges": driver.irq_edges - edges,
                            "busy": driver.field("STATUS", "BUSY", status)})
        return refused
    refused = await refuse(bad_programs, "bad start")
    launches, after_soft_reset = [], []
    for index, (program, directory) in enumerate(zip(programs, program_dirs, strict=True)):
        if soft_reset and index:
            await driver.write_reg("CONTROL", driver.bits("CONTROL", SOFT_RESET=1))
            after_soft_reset.append({name: await driver.read_reg(name)
                                     for name in ("STATUS", "IRQ_STATUS", "PROG_ADDR")})
        await driver.write_reg("POSITION", check_position(position))
        launches.append(await driver.run(
            program, timeout=timeouts[index] if timeouts else timeout,
            outputs_file=Path(directory) / "outputs.npz", watchdog=watchdog,
            windows=windows))
    result = {"launches": launches, "refused": refused, "registers": registers,
              "probes": probes, "after_soft_reset": after_soft_reset,
              "refused_last": await refuse(last_starts, "last start")}
    if abort_after_last:
        note = await driver.abort()
        result["abort"] = {"note": note, "STATUS": await driver.read_reg("STATUS")}
        result["after_abort"] = await driver.run(
            programs[0], timeout=timeouts[0] if timeouts else timeout,
            outputs_file=Path(program_dirs[0]) / "outputs_after_abort.npz", watchdog=watchdog)
    return result


async def run_ip_schedule(bench, plan_file, *, pause=False, perf_counters=None):
    """Run an orchestrated schedule (``plan_file`` of
    :func:`rdu.runtime.orchestration_files`) on the IP top as a CPU driver would: the
    images, bitstreams and schedule written into memory, ``SCHEDULE_ADDR``,
    ``SCHEDULE_LEN`` and ``WATCHDOG`` written, ``CONTROL.SCHEDULE_START`` with the
    interrupt enabled, then nothing until the interrupt. An error raises
    :class:`RunError` with :func:`rdu.schedule.error_message` (the failing command from
    ``SCHEDULE_INDEX``). Returns ``{"cycles": RUN_CYCLES, "completed", "status",
    "launches": [{"program", "outputs_file"}], "irq_edges"}``."""
    plan = OrchestrationPlan.load(plan_file)
    programs = [Program.load(launch.dir) for launch in plan.launches]
    machine = programs[0].machine
    driver = IPDriver(bench, machine, pause=pause, perf_counters=perf_counters or ())
    with np.load(plan.writes) as arrays:
        for image in plan.memory:
            await driver.write(image.address, arrays[image.key])
        words = arrays["schedule"]
    commands = decode(words)
    await driver.clear_irq()
    edges = driver.irq_edges
    await driver.write_reg("SCHEDULE_ADDR", plan.address)
    await driver.write_reg("SCHEDULE_LEN", WORD_BYTES * len(words))
    await driver.write_reg("WATCHDOG", hardware_watchdog_cycles(plan.timeout))
    await driver.write_reg("CONTROL", driver.bits("CONTROL", SCHEDULE_START=1, IRQ_ENABLE=1))
    await driver.wait_irq(plan.timeout + 10_000, "schedule")
    status = await driver.read_reg("STATUS")
    progress = await driver.read_reg("SCHEDULE_INDEX")
    index = driver.field("SCHEDULE_INDEX", "INDEX", progress)
    if driver.field("STATUS", "ERROR", status):
        error = await driver.read_reg("ERROR")
        raise RunError(error_message(
            commands, index, driver.field("ERROR", "SOURCE", error),
            driver.field("ERROR", "CODE", error), await driver.read_reg("ERROR_UNIT"),
            agcus=machine.agcus, capacity=DEFAULT_COMMANDS, length=WORD_BYTES * len(words)))
    if not driver.field("STATUS", "DONE", status):
        raise RunError(f"schedule: interrupt without DONE or ERROR (STATUS = {status:#x})")
    launches = []
    for launch, program in zip(plan.launches, programs, strict=True):
        outputs = {name: await driver.read(address, count)
                   for name, (address, count) in launch.outputs.items()}
        outputs_file = Path(launch.dir) / "outputs.npz"
        np.savez(outputs_file, **outputs)
        launches.append({"program": program.name, "outputs_file": str(outputs_file)})
    return {"cycles": await driver.read_reg("RUN_CYCLES"),
            "completed": driver.field("SCHEDULE_INDEX", "COMPLETED", progress),
            "status": status, "launches": launches, "irq_edges": driver.irq_edges - edges}
