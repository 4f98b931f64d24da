"""A compiled program: what the compiler hands to a runtime (model or RTL).

A :class:`Program` is everything needed to run one kernel on a :class:`~rdu.machine.Machine`:

* ``machine``: the system it was compiled for (array, AGCUs, memory capacities); a
  runtime refuses it on any other machine;
* ``bitstream``: the configuration words (header, records; :mod:`rdu.bitstream`);
  the runtime places them at ``bitstream_address`` and loads them with the AGCU 0
  ``PROGRAM_LOAD`` command;
* ``tensors``: the manifest of its tensors, ``name -> {"role": "input"|"output",
  "dtype", "shape", "address", "words", "layout"}``: where each lives and how it is
  laid out, so a runtime can pack the user's data and unpack the results;
* ``inputs``: memory images, ``name -> (byte address, uint32 words)``, written into
  memory before the run (filled by the kernel's packer from user or random data; a
  program file keeps only the addresses: its images are ``None`` until packed);
* ``outputs``: ``name -> (byte address, word count)``, read back after the run;
* ``execute``: the AGCUs that receive ``EXECUTE`` (all at once, after ``start``);
* ``kernel`` and ``params``: which kernel and its shape (``{"m": .., "n": .., "k": ..}``);
* ``meta``: further JSON-able facts for the report (tiling, mapping, MACs).

A program file (``.rdu``, :meth:`Program.write` / :meth:`Program.read`) holds the
manifest and the bitstream in one file::

    offset 0   magic  b"RDUPROG\\0"
           8   u32    format version (:data:`FORMAT`)
          12   u32    manifest bytes (UTF-8 JSON, padded with spaces to 4 bytes)
          16   u32    CRC-32 of the manifest bytes
          20   u32    bitstream words
          24   manifest, then the bitstream (little-endian 32-bit words)

:meth:`Program.save` writes a directory (``program.rdu`` and ``inputs.npz``) that
:meth:`Program.load` reads back, so a program with its images runs in another
process (the cocotb simulation).
"""

import json
import struct
import zlib
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from .dma_windows import merge_regions
from .machine import Machine, MachineError

__all__ = ["Program", "ProgramError", "FORMAT", "MAGIC"]

FORMAT = 2
MAGIC = b"RDUPROG\0"
_HEADER = struct.Struct("<8sIIII")


class ProgramError(ValueError):
    """A program file or directory that is missing or malformed (one-line message)."""


def _machine(value):
    if isinstance(value, Machine):
        return value
    value = dict(value)
    if "capacity_bytes" in value:              # the array's own parameter name
        value["pmu_bytes"] = value.pop("capacity_bytes")
    return Machine.from_json(value)


@dataclass
class Program:
    name: str
    machine: Machine
    bitstream: list
    bitstream_address: int
    inputs: dict = field(default_factory=dict)     # name -> (address, np.uint32 array)
    outputs: dict = field(default_factory=dict)    # name -> (address, words)
    execute: list = field(default_factory=list)    # AGCU indices
    meta: dict = field(default_factory=dict)
    tensors: dict = field(default_factory=dict)    # name -> manifest entry
    kernel: str = None
    params: dict = field(default_factory=dict)

    def __post_init__(self):
        self.machine = _machine(self.machine)
        if self.kernel is None:
            self.kernel = self.meta.get("kernel", self.name)

    def launch_problem(self, machine=None):
        """What makes this program impossible to launch on ``machine`` (default its
        own), as one line without the program's name, or ``None``: the AGCUs it
        executes must be listed, distinct and present. The RTL host driver and the
        functional model both ask this before anything runs."""
        agcus = (machine or self.machine).agcus
        execute = list(self.execute)
        if not execute:
            return "executes no AGCU (program.execute is empty)"
        if len(set(execute)) != len(execute):
            return f"executes an AGCU twice: {execute}"
        for k in execute:
            if not isinstance(k, (int, np.integer)) or not 0 <= k < agcus:
                return f"executes AGCU {k}, the system has {agcus}"
        return None

    def dma_windows(self, count):
        """The memory windows this program's AGCUs need, from its manifest, at most
        ``count``: ``[(base, size, read, write)]`` covering its inputs (read), its
        outputs (written) and its bitstream (read), each widened to whole beats (the
        AGCU moves whole beats). Regions that overlap or touch are merged (a window
        both read and written then); with more than ``count`` left, the two neighbours
        with the smallest gap between them are merged until ``count`` remain (the gap
        is then allowed too): :func:`rdu.dma_windows.merge_regions`."""
        return merge_regions(self.dma_regions(), count, self.machine.beat_bytes)

    def dma_regions(self, bitstream=True):
        """``[(address, nbytes, read, write)]``: the bitstream (unless ``bitstream`` is
        false: a schedule loads it from elsewhere) and the inputs (read) and the outputs
        (written) of the manifest, as they are (:meth:`dma_windows` merges them); a
        positioned image (``meta["positions"]``) covers its whole table."""
        sizes = {entry["address"]: entry["words"] for entry in self.tensors.values()
                 if "address" in entry and "words" in entry}
        tables = self._tables()
        regions = [(self.bitstream_address, 4 * len(self.bitstream), 1, 0)] if bitstream else []
        for name, (address, words) in self.inputs.items():
            base, extra = tables.get(address, (address, 0))
            length = len(words) if words is not None else sizes.get(base)
            if length is None:
                raise ProgramError(f"program {self.name!r}: input {name!r} has no size "
                                   f"in the manifest: no window can be declared")
            regions.append((base, 4 * length + extra, 1, 0))
        for address, words in self.outputs.values():
            base, extra = tables.get(address, (address, 0))
            regions.append((base, 4 * words + extra, 0, 1))
        return regions

    def _entries(self, position):
        """``{table base: (entry address at position, bytes past the entry's own)}`` of
        the positioned images (``meta["positions"]``: ``{image: {"stride",
        "entries"}}``)."""
        images = self.meta.get("images", {})
        return {images[name]["address"]:
                (images[name]["address"] + position * table["stride"],
                 table["stride"] * (table["entries"] - 1))
                for name, table in self.meta.get("positions", {}).items() if name in images}

    def _tables(self):
        """``{manifest address: (table base, bytes past the entry's own)}`` at
        :meth:`at_position`'s position."""
        return {entry: (base, extra) for base, (entry, extra)
                in self._entries(self.meta.get("position", 0)).items()}

    def at_position(self, position):
        """This program launched at ``position``: the manifest's inputs and outputs of
        positioned images (``meta["positions"]``: ``{image: {"stride", "entries"}}``)
        moved to entry ``position`` of their tables, where the AGCUs read and write them
        (``docs/agcu.md``, **Positioned patterns**); itself when nothing moves. A
        :class:`ProgramError` when the position is past a table's last entry."""
        tables = self.meta.get("positions")
        if not tables or position == self.meta.get("position", 0):
            return self
        for name, table in tables.items():
            if position >= table["entries"]:
                raise ProgramError(f"program {self.name!r}: position {position} is past "
                                   f"the {table['entries']} entries of {name!r}")
        entries = self._entries(position)
        moved = {now: entries[base][0] for now, (base, _) in self._tables().items()}
        return replace(
            self, meta=dict(self.meta, position=position),
            inputs={name: (moved.get(address, address), words)
                    for name, (address, words) in self.inputs.items()},
            outputs={name: (moved.get(address, address), words)
                     for name, (address, words) in self.outputs.items()})

    @property
    def geometry(self):
        """The machine as a dict (``rows``, ``cols``, ``lanes``, ``agcus``,
        ``agcu_positions``, ``stages``, ``capacity_bytes``...)."""
        data = self.machine.to_json()
        data["capacity_bytes"] = data["pmu_bytes"]
        return data

    # -- manifest ------------------------------------------------------------------------
    def manifest(self):
        """Everything but the bitstream and the images, as JSON-able data."""
        return {
            "format": FORMAT,
            "name": self.name,
            "kernel": self.kernel,
            "params": self.params,
            "machine": self.machine.to_json(),
            "bitstream_address": self.bitstream_address,
            "bitstream_words": len(self.bitstream),
            "execute": list(self.execute),
            "tensors": self.tensors,
            "outputs": {name: [address, words]
                        for name, (address, words) in self.outputs.items()},
            "inputs": {name: address for name, (address, _) in self.inputs.items()},
            "meta": self.meta,
        }

    def to_bytes(self):
        manifest = json.dumps(self.manifest(), indent=1).encode()
        manifest += b" " * (-len(manifest) % 4)
        words = np.asarray(self.bitstream, dtype="<u4").tobytes()
        return _HEADER.pack(MAGIC, FORMAT, len(manifest), zlib.crc32(manifest),
                            len(self.bitstream)) + manifest + words

    def write(self, path):
        """Write the program file (manifest + bitstream) to ``path``."""
        path = Path(path)
        path.write_bytes(self.to_bytes())
        return path

    @classmethod
    def from_bytes(cls, raw, where="program"):
        if len(raw) < _HEADER.size or raw[:8] != MAGIC:
            raise ProgramError(f"{where}: not an rdu program file (no {MAGIC[:7].decode()} "
                               f"header; a bare bitstream is inspected with 'rdu inspect')")
        _, version, manifest_bytes, crc, words = _HEADER.unpack_from(raw)
        if version != FORMAT:
            raise ProgramError(f"{where}: program format {version}, this tool reads {FORMAT}")
        end = _HEADER.size + manifest_bytes
        if len(raw) != end + 4 * words:
            raise ProgramError(f"{where}: {len(raw)} bytes, the header announces "
                               f"{end + 4 * words} (truncated or padded file)")
        manifest = raw[_HEADER.size:end]
        if zlib.crc32(manifest) != crc:
            raise ProgramError(f"{where}: manifest CRC mismatch (file damaged)")
        try:
            description = json.loads(manifest)
            machine = Machine.from_json(description["machine"], f"{where}: machine")
            bitstream = np.frombuffer(raw[end:], dtype="<u4").astype(np.uint32).tolist()
            return cls(description["name"], machine, bitstream,
                       description["bitstream_address"],
                       {name: (address, None) for name, address in description["inputs"].items()},
                       {name: tuple(value) for name, value in description["outputs"].items()},
                       description["execute"], description["meta"], description["tensors"],
                       description["kernel"], description["params"])
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            raise ProgramError(f"{where}: manifest is not JSON ({error})") from None
        except KeyError as error:
            raise ProgramError(f"{where}: manifest has no {error.args[0]!r}") from None
        except MachineError as error:
            raise ProgramError(str(error)) from None
        except (TypeError, ValueError) as error:
            raise ProgramError(f"{where}: malformed manifest ({error})") from None

    @classmethod
    def read(cls, path):
        """Read a program file (:meth:`write`); :class:`ProgramError` names what is wrong."""
        path = Path(path)
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            raise ProgramError(f"{path}: no such file") from None
        except IsADirectoryError:
            return cls.load(path)
        return cls.from_bytes(raw, str(path))

    # -- with images, for another process --------------------------------------------------
    def save(self, directory):
        """Write ``program.rdu`` and ``inputs.npz`` (the images) to ``directory``."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        self.write(directory / "program.rdu")
        np.savez(directory / "inputs.npz",
                 **{name: np.asarray(words, dtype=np.uint32)
                    for name, (_, words) in self.inputs.items() if words is not None})
        return directory

    @classmethod
    def load(cls, directory):
        directory = Path(directory)
        path = directory / "program.rdu"
        if not path.exists():
            raise ProgramError(f"{directory}: no program.rdu (not a program directory)")
        program = cls.from_bytes(path.read_bytes(), str(path))
        images = directory / "inputs.npz"
        if images.exists():
            with np.load(images) as arrays:
                program.inputs = {name: (address, arrays[name] if name in arrays.files
                                         else None)
                                  for name, (address, _) in program.inputs.items()}
        return program
