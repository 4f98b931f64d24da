"""Formal proofs (SymbiYosys, smtbmc with z3) of stream properties of the gateware.

One module per unit builds a harness (an ``Elaboratable`` that instantiates the unit
and adds ``Assume``/``Assert`` statements); :mod:`formal.driver` writes the SymbiYosys
job, runs it in ``build/formal/<name>/`` and reports the result. ``docs/formal.md``
lists the properties, ``python -m formal`` (or ``make formal``) runs them.
"""
