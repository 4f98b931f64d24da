"""A compiled program: what the compiler hands to a runtime (model or RTL).

A :class:`Program` is everything needed to run one kernel on a system of a
:class:`~rdu.bitstream.Geometry` (a tile array plus its AGCUs):

* ``bitstream``: the configuration words (header, records; :mod:`rdu.bitstream`);
  the runtime places them at ``bitstream_address`` and loads them with the AGCU 0
  ``PROGRAM_LOAD`` command;
* ``inputs``: memory images, ``name -> (byte address, uint32 words)``, written into
  the memory models before the run (tensors already in the layout the kernel reads);
* ``outputs``: ``name -> (byte address, word count)``, read back after the run;
* ``execute``: the AGCUs that receive ``EXECUTE`` (all at once, after ``start``);
  the run ends when every one of them is ``done``;
* ``meta``: JSON-able facts for the report and for unpacking outputs (shapes, MACs,
  layouts).

:meth:`Program.save` writes a directory (``program.json``, ``bitstream.bin``,
``inputs.npz``) that :meth:`Program.load` reads back, so a program compiled once runs
in another process (the cocotb simulation) or on another day.
"""

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

__all__ = ["Program", "ProgramError"]

FORMAT = 1


class ProgramError(ValueError):
    """A program directory that is missing or malformed."""


@dataclass
class Program:
    name: str
    geometry: dict                  # rows, cols, lanes, agcus
    bitstream: list
    bitstream_address: int
    inputs: dict = field(default_factory=dict)     # name -> (address, np.uint32 array)
    outputs: dict = field(default_factory=dict)    # name -> (address, words)
    execute: list = field(default_factory=list)    # AGCU indices
    meta: dict = field(default_factory=dict)

    def save(self, directory):
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "bitstream.bin").write_bytes(
            np.asarray(self.bitstream, dtype="<u4").tobytes())
        np.savez(directory / "inputs.npz",
                 **{name: np.asarray(words, dtype=np.uint32)
                    for name, (_, words) in self.inputs.items()})
        description = {
            "format": FORMAT,
            "name": self.name,
            "geometry": self.geometry,
            "bitstream_address": self.bitstream_address,
            "inputs": {name: address for name, (address, _) in self.inputs.items()},
            "outputs": {name: [address, words]
                        for name, (address, words) in self.outputs.items()},
            "execute": list(self.execute),
            "meta": self.meta,
        }
        (directory / "program.json").write_text(json.dumps(description, indent=1))
        return directory

    @classmethod
    def load(cls, directory):
        directory = Path(directory)
        path = directory / "program.json"
        if not path.exists():
            raise ProgramError(f"{directory}: no program.json (not a program directory)")
        try:
            description = json.loads(path.read_text())
        except json.JSONDecodeError as error:
            raise ProgramError(f"{path}: not JSON ({error})") from None
        if description.get("format") != FORMAT:
            raise ProgramError(f"{path}: program format {description.get('format')!r}, "
                               f"this tool reads {FORMAT}")
        raw = (directory / "bitstream.bin").read_bytes()
        if len(raw) % 4:
            raise ProgramError(f"{directory / 'bitstream.bin'}: {len(raw)} bytes is not "
                               f"a whole number of 32-bit words")
        bitstream = np.frombuffer(raw, dtype="<u4").astype(np.uint32).tolist()
        with np.load(directory / "inputs.npz") as arrays:
            inputs = {name: (address, arrays[name])
                      for name, address in description["inputs"].items()}
        return cls(description["name"], description["geometry"], bitstream,
                   description["bitstream_address"], inputs,
                   {name: tuple(value) for name, value in description["outputs"].items()},
                   description["execute"], description["meta"])
