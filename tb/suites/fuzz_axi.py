"""AXI4-Lite register fuzzing of the IP top (:class:`hdl.ip.RDUIP`, ``docs/ip.md``):
random reads and writes (any byte strobes, any address of the 4 KiB window, mapped or
not), runs started with good and bad run registers, ``START`` and ``SCHEDULE_START``
while busy, soft resets when idle; each access checked against the documented
register map (:func:`hdl.regmap.register_map`) and its answer bounded in cycles.

What is expected (``docs/ip.md``, "Defined behaviour of odd accesses" and "What
``CONTROL.START`` does"): every access answered ``OKAY``; a read of an unmapped word 0;
a ``const`` field its reset value, a ``control``/``scratch`` field what was written
under the strobes, a ``pulse`` field 0; a write to a read-only field ignored; a
``START`` or ``SCHEDULE_START`` while ``STATUS.BUSY`` ignored (the run's result is
that of the first); a run ends with ``DONE`` or ``ERROR`` (``ERROR.SOURCE`` as
documented: ``REQUEST`` for an ``EXEC_MASK`` of 0 or a missing AGCU or a bad schedule
length, ``AGCU`` for a bad program length or an unmapped program address, ``LOADER``
for an address without a program) and raises ``IRQ_STATUS``; ``SOFT_RESET`` clears
``STATUS``, ``ERROR`` and ``IRQ_STATUS`` and keeps the other registers.
"""

import random

from rdu.program import Program
from rdu.sim.ip_host import IPDriver

from hdl.orchestrator import COMMAND_BYTES, DEFAULT_COMMANDS

__all__ = ["run_axi_fuzz", "ACCESS_CYCLES", "RUN_CYCLES"]

#: Cycles an AXI4-Lite access may take (with random pauses on every channel).
ACCESS_CYCLES = 2000
#: Cycles a run may take before the fuzzer calls it a hang.
RUN_CYCLES = 200_000
#: A program address no memory region maps (answered ``DECERR``) and one that holds zeros.
UNMAPPED = 0x8000_0000
ZEROS = 0x0010_0000


class _Fuzzer:
    """The state of one campaign: the driver, the expected register contents, counts and
    the mismatches found."""

    def __init__(self, bench, driver, program, rng):
        self.bench, self.driver, self.program, self.rng = bench, driver, program, rng
        self.regmap = driver.regmap
        self.by_word = {register.offset // 4: register for register in self.regmap.registers}
        self.shadow = {register.name: register.reset for register in self.regmap.registers}
        self.counts = {"reads": 0, "writes": 0, "unmapped": 0, "runs": 0,
                       "ignored starts": 0, "soft resets": 0}
        self.outcomes = {}
        self.problems = []

    def fail(self, text):
        self.problems.append(f"transaction {sum(self.counts.values())}: {text}")

    async def bounded(self, coroutine, what, cycles=ACCESS_CYCLES):
        from cocotb.triggers import with_timeout
        try:
            return await with_timeout(coroutine, cycles * 10, "ns")   # 10 ns clock
        except Exception as error:          # cocotb's SimTimeoutError
            self.fail(f"{what}: no answer within {cycles} cycles ({type(error).__name__})")
            raise

    def constant(self, register):
        """The value a read of ``register`` must give, or None (a live status)."""
        value, known = 0, True
        for field in register.fields:
            if field.kind in ("const",):
                value |= field.reset << field.lsb
            elif field.kind in ("control", "scratch"):
                value |= self.shadow[register.name] & field.mask
            elif field.kind == "pulse":
                pass
            else:
                known = False
        return value if known else None

    async def read(self, address):
        response = await self.bounded(self.driver.lite.read(address, 4), f"read {address:#x}")
        self.counts["reads"] += 1
        data = int.from_bytes(response.data, "little")
        if int(response.resp) != 0:
            self.fail(f"read {address:#x}: response {int(response.resp)}, expected OKAY")
        register = self.by_word.get(address // 4)
        if register is None:
            self.counts["unmapped"] += 1
            if data:
                self.fail(f"read of unmapped {address:#x} gave {data:#x}, expected 0")
            return data
        expected = self.constant(register)
        if expected is not None and data != expected:
            self.fail(f"read {register.name}: {data:#x}, expected {expected:#x}")
        return data

    async def write(self, address, value, strobes):
        """Write the bytes of ``value`` selected by ``strobes`` (contiguous) at the word
        of ``address``; update the expected contents."""
        low = (strobes & -strobes).bit_length() - 1
        count = bin(strobes).count("1")
        word = address & ~3
        data = ((value >> (8 * low)) & ((1 << (8 * count)) - 1)).to_bytes(count, "little")
        response = await self.bounded(self.driver.lite.write(word + low, data),
                                      f"write {address:#x}")
        self.counts["writes"] += 1
        if int(response.resp) != 0:
            self.fail(f"write {address:#x}: response {int(response.resp)}, expected OKAY")
        register = self.by_word.get(word // 4)
        if register is None:
            self.counts["unmapped"] += 1
            return
        mask = sum(0xFF << (8 * i) for i in range(4) if strobes >> i & 1)
        for field in register.fields:
            if field.kind in ("control", "scratch"):
                bits = field.mask & mask
                self.shadow[register.name] = (self.shadow[register.name] & ~bits) | \
                    (value & bits)

    async def write_reg(self, name, value):
        await self.write(self.regmap[name].offset, value, 0xF)

    async def status(self):
        return await self.read(self.regmap["STATUS"].offset)

    async def wait_idle(self, what):
        """Poll ``STATUS`` until ``BUSY`` drops (bounded); the final ``STATUS``."""
        from cocotb.triggers import ClockCycles
        waited = 0
        while True:
            status = await self.status()
            if not self.driver.field("STATUS", "BUSY", status):
                return status
            if waited >= RUN_CYCLES:
                self.fail(f"{what}: STATUS.BUSY after {RUN_CYCLES} cycles (a hang)")
                return None
            await ClockCycles(self.bench.dut.clk, 200)
            waited += 200


def _strobes(rng):
    """Random contiguous byte strobes of a 32-bit word (at least one byte)."""
    low = rng.randrange(4)
    return sum(1 << i for i in range(low, rng.randrange(low, 4) + 1))


async def _random_access(fuzz):
    rng, regmap = fuzz.rng, fuzz.regmap
    choice = rng.random()
    if choice < 0.1:
        address = rng.choice([0x4C, 0x6C, 0x70, 0x7C, 0xAC, 0xB0, 0xFFC,
                              rng.randrange(0x80, 0x1000)])
    else:
        register = rng.choice(regmap.registers)
        address = register.offset
    address = (address & ~3) | (rng.randrange(4) if rng.random() < 0.1 else 0)
    if rng.random() < 0.5:
        await fuzz.read(address & ~3)
        return
    register = fuzz.by_word.get(address // 4)
    # the run registers and the control word are exercised by _run; IRQ_STATUS by both
    if register is not None and register.name in ("CONTROL", "IRQ_STATUS"):
        await fuzz.read(address & ~3)
        return
    await fuzz.write(address, rng.getrandbits(32), _strobes(rng))
    if rng.random() < 0.5:
        await fuzz.read(address & ~3)


async def _opening(fuzz):
    """What every campaign covers whatever its seed: a read, a write and a read back of
    a random unmapped word (a campaign with many runs leaves few random accesses), then
    a run."""
    rng = fuzz.rng
    while True:
        word = rng.randrange(0x1000 // 4)
        if word not in fuzz.by_word:
            break
    await fuzz.read(4 * word)
    await fuzz.write(4 * word, rng.getrandbits(32), _strobes(rng))
    await fuzz.read(4 * word)
    await _run(fuzz)


def _run_registers(fuzz):
    """``(registers, expected source name or None for DONE)`` of a random run."""
    rng, program, agcus = fuzz.rng, fuzz.program, fuzz.driver.machine.agcus
    mask = sum(1 << k for k in program.execute)
    registers = {"PROG_ADDR": program.bitstream_address,
                 "PROG_LEN": 4 * len(program.bitstream), "EXEC_MASK": mask,
                 "ARG_ADDR": 0, "ARG_LEN": 0, "WATCHDOG": 0x10000,
                 "WINDOW_CTRL": 0,     # (random writes may have enabled the windows
                 "RUN_BUDGET": 0}      # or set a budget)
    kind = rng.randrange(7)
    expected = None
    if kind == 1:
        registers["EXEC_MASK"], expected = rng.choice([0, 1 << agcus, 1 << 31]), "REQUEST"
    elif kind == 2:
        registers["PROG_LEN"], expected = rng.choice([0, 2, 4 * len(program.bitstream) + 3]), \
            "AGCU"
    elif kind == 3:
        registers["PROG_ADDR"], expected = UNMAPPED, "AGCU"
    elif kind == 4:
        registers["PROG_ADDR"], expected = ZEROS, "LOADER"
    elif kind == 6:             # a run budget shorter than the kernel's run (about 55
        # cycles while an AGCU executes, on cocotbext-axi's memory): stopped
        registers["RUN_BUDGET"], expected = rng.randrange(1, 33), "WATCHDOG"
    return registers, expected, kind == 5


async def _run(fuzz):
    """A START with good or bad run registers, maybe a second START or a
    SCHEDULE_START while it runs (ignored); the end checked."""
    driver, rng = fuzz.driver, fuzz.rng
    registers, expected, again = _run_registers(fuzz)
    for name, value in registers.items():
        await fuzz.write_reg(name, value)
    await fuzz.write(fuzz.regmap["IRQ_STATUS"].offset, 0b11, 0xF)
    irq_enable = rng.randrange(2)
    control = driver.bits("CONTROL", START=1, IRQ_ENABLE=irq_enable)
    await fuzz.write(fuzz.regmap["CONTROL"].offset, control, 0xF)
    fuzz.shadow["CONTROL"] = driver.bits("CONTROL", IRQ_ENABLE=irq_enable)
    fuzz.counts["runs"] += 1
    if again:
        status = await fuzz.status()
        if driver.field("STATUS", "BUSY", status):
            fuzz.counts["ignored starts"] += 1
            await fuzz.write_reg("PROG_LEN", 0)        # a load during the run: latched?
            again_bits = rng.choice([driver.bits("CONTROL", START=1, IRQ_ENABLE=irq_enable),
                                     driver.bits("CONTROL", SCHEDULE_START=1,
                                                 IRQ_ENABLE=irq_enable)])
            await fuzz.write(fuzz.regmap["CONTROL"].offset, again_bits, 0xF)
    status = await fuzz.wait_idle("START")
    if status is None:
        return
    error = await fuzz.read(fuzz.regmap["ERROR"].offset)
    pending = await fuzz.read(fuzz.regmap["IRQ_STATUS"].offset)
    sources = fuzz.regmap.enum("ERROR", "SOURCE")
    got = (sources(driver.field("ERROR", "SOURCE", error)).name
           if driver.field("STATUS", "ERROR", status) else None)
    done = driver.field("STATUS", "DONE", status)
    fuzz.outcomes[got or "DONE"] = fuzz.outcomes.get(got or "DONE", 0) + 1
    if got != expected or done == bool(got):
        fuzz.fail(f"run {registers}: STATUS {status:#x}, ERROR {error:#x}, expected "
                  f"{expected or 'DONE'}")
    if pending != (0b10 if got else 0b01):
        fuzz.fail(f"run: IRQ_STATUS {pending:#x} after {got or 'DONE'}")
    if driver.field("STATUS", "AGCU_BUSY", status):
        await _abort(fuzz, irq_enable)
    if int(driver.dut.irq.value) != (irq_enable and pending != 0):
        fuzz.fail(f"run: irq {int(driver.dut.irq.value)} with IRQ_ENABLE {irq_enable}")
    if rng.random() < 0.5:
        await fuzz.write(fuzz.regmap["IRQ_STATUS"].offset, pending, 0xF)
        if await fuzz.read(fuzz.regmap["IRQ_STATUS"].offset):
            fuzz.fail("IRQ_STATUS not cleared by writing 1")


async def _abort(fuzz, irq_enable):
    """``CONTROL.ABORT`` after a run that left AGCUs busy (a stop by the run budget):
    ``ABORTING`` and ``AGCU_BUSY`` must drop within :data:`RUN_CYCLES`."""
    driver = fuzz.driver
    await fuzz.write(fuzz.regmap["CONTROL"].offset,
                     driver.bits("CONTROL", ABORT=1, IRQ_ENABLE=irq_enable), 0xF)
    fuzz.counts["aborts"] = fuzz.counts.get("aborts", 0) + 1
    for _ in range(RUN_CYCLES // 8):
        status = await fuzz.status()
        if not (driver.field("STATUS", "ABORTING", status) or
                driver.field("STATUS", "AGCU_BUSY", status)):
            return
    fuzz.fail(f"CONTROL.ABORT: STATUS {status:#x} still aborting (a hang)")


async def _schedule(fuzz):
    """A SCHEDULE_START with a length the orchestrator refuses (``REQUEST``)."""
    driver = fuzz.driver
    await fuzz.write_reg("SCHEDULE_ADDR", ZEROS)
    await fuzz.write_reg("SCHEDULE_LEN", fuzz.rng.choice([0, 8, 17,
                                                         COMMAND_BYTES * (DEFAULT_COMMANDS + 1)]))
    await fuzz.write(fuzz.regmap["CONTROL"].offset, driver.bits("CONTROL", SCHEDULE_START=1),
                     0xF)
    fuzz.shadow["CONTROL"] = 0
    fuzz.counts["runs"] += 1
    status = await fuzz.wait_idle("SCHEDULE_START")
    if status is None:
        return
    error = await fuzz.read(fuzz.regmap["ERROR"].offset)
    sources = fuzz.regmap.enum("ERROR", "SOURCE")
    source = sources(driver.field("ERROR", "SOURCE", error)).name
    fuzz.outcomes[f"schedule {source}"] = fuzz.outcomes.get(f"schedule {source}", 0) + 1
    if not (driver.field("STATUS", "SCHEDULE", status) and
            driver.field("STATUS", "ERROR", status) and source == "REQUEST"):
        fuzz.fail(f"SCHEDULE_START with a bad length: STATUS {status:#x}, ERROR {error:#x}")


async def _soft_reset(fuzz):
    """SOFT_RESET when idle: STATUS, ERROR, IRQ_STATUS cleared, the rest kept."""
    driver = fuzz.driver
    await fuzz.write(fuzz.regmap["CONTROL"].offset,
                     driver.bits("CONTROL", SOFT_RESET=1, IRQ_ENABLE=fuzz.rng.randrange(2)),
                     0xF)
    fuzz.shadow["CONTROL"] &= fuzz.regmap["CONTROL"].field("IRQ_ENABLE").mask
    fuzz.counts["soft resets"] += 1
    status = await fuzz.status()
    if driver.field("STATUS", "DONE", status) or driver.field("STATUS", "ERROR", status):
        fuzz.fail(f"SOFT_RESET: STATUS {status:#x}")
    for name in ("ERROR", "IRQ_STATUS"):
        value = await fuzz.read(fuzz.regmap[name].offset)
        if value:
            fuzz.fail(f"SOFT_RESET: {name} {value:#x}")
    for register in fuzz.regmap.registers:
        await fuzz.read(register.offset)


async def run_axi_fuzz(bench, program_dir, *, transactions=300, fuzz_seed=1,
                       pause=True):
    """Bench body (under cocotb, the IP top): ``transactions`` random actions (about one
    AXI4-Lite access each; a run is several). Returns ``{"counts", "outcomes",
    "problems"}``: what was done, how the runs ended, every disagreement with the
    documented behaviour (empty when none)."""
    program = Program.load(program_dir)
    driver = IPDriver(bench, program.machine, pause=pause)
    for address, words in program.inputs.values():
        if words is not None:
            await driver.write(address, words)
    await driver.write(program.bitstream_address, program.bitstream)
    await bench.cycles(5)
    fuzz = _Fuzzer(bench, driver, program, random.Random(fuzz_seed))
    fuzz.shadow["CONTROL"] = 0
    try:
        await _opening(fuzz)
    except Exception:                           # a bounded wait expired: reported
        return {"counts": fuzz.counts, "outcomes": fuzz.outcomes, "problems": fuzz.problems}
    actions = 0
    while sum(fuzz.counts[name] for name in ("reads", "writes")) < transactions:
        choice = fuzz.rng.random()
        try:
            if choice < 0.8 or actions == 0:
                await _random_access(fuzz)
            elif choice < 0.93:
                await _run(fuzz)
            elif choice < 0.97:
                await _schedule(fuzz)
            else:
                await _soft_reset(fuzz)
        except Exception:                       # a bounded wait expired: reported
            break
        actions += 1
    return {"counts": fuzz.counts, "outcomes": fuzz.outcomes, "problems": fuzz.problems}
