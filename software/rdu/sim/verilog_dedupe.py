"""Merge identical modules in Amaranth's Verilog output.

Amaranth writes one Verilog module per submodule *instance*: a 4x4 array holds eight
copies of the PCU, each with its own copies of the 32 ALUs. Verilator then compiles
every copy separately. :func:`dedupe_modules` keeps one module per distinct body and
points every instance at it, so Verilator compiles each distinct unit once; the design
is unchanged.

Two modules are merged only when their texts are equal after (a) replacing the module's
own name, (b) renaming Yosys's numbered internal names (``\\$auto$...$840``, whose
numbers come from a global counter) to canonical names derived from how each is used,
and (c) sorting the declarations and the module-level ``assign`` statements (Yosys
orders those by the original names; both are order-free in Verilog). Everything else
(``always`` blocks, instances) is compared in order, so merged modules are equal up to
a renaming of internal wires. Modules are merged bottom-up until nothing changes, so a
parent whose children were merged can be merged in turn.
"""

import hashlib
import re

__all__ = ["dedupe_modules"]

_MODULE = re.compile(r"^((?:\(\*[^\n]*\*\)\n)*)module (\S+) ?\((.*?)\);\n(.*?)^endmodule\n",
                     re.S | re.M)
#: Yosys's numbered names: ``\$<anything>$<digits>`` followed by the escaped-name space.
_NUMBERED = re.compile(r"\\\$\S*\$\d+(?= )")
_DECLARATION = re.compile(r"^\s*(wire|reg|input|output|inout)\b[^;]*;\s*$")


def _canonical_body(name, body):
    body = body.replace(f"{name} ", "\\$self ")
    lines = body.split("\n")
    statements = [line for line in lines if not _DECLARATION.match(line)]
    numbered = {}
    for line in statements:
        for match in _NUMBERED.finditer(line):
            numbered.setdefault(match.group(0), len(numbered))
    # Colour refinement: an identifier's class is the multiset of statements it appears
    # in, with itself marked and the others replaced by their previous class.
    classes = {ident: "" for ident in numbered}
    for _ in range(3):
        occurrences = {ident: [] for ident in numbered}
        for line in statements:
            idents = set(_NUMBERED.findall(line))
            if not idents:
                continue
            for ident in idents:
                text = _NUMBERED.sub(
                    lambda m, ident=ident, classes=classes: "@" if m.group(0) == ident
                    else f"?{classes[m.group(0)]}", line)
                occurrences[ident].append(text)
        classes = {ident: hashlib.sha1("\n".join(sorted(texts)).encode()).hexdigest()[:12]
                   for ident, texts in occurrences.items()}
    order = sorted(numbered, key=lambda ident: (classes[ident], numbered[ident]))
    rename = {ident: f"\\$canonical${index}" for index, ident in enumerate(order)}

    def substitute(line):
        return _NUMBERED.sub(lambda m: rename.get(m.group(0), m.group(0)), line)
    declarations = sorted(substitute(line) for line in lines if _DECLARATION.match(line))
    # module-level continuous assignments are order-free too (Yosys orders them by name);
    # everything else (always blocks, instances) is compared in order
    assigns = sorted(substitute(line) for line in statements if line.startswith("  assign "))
    rest = [substitute(line) for line in statements if not line.startswith("  assign ")]
    return "\n".join(declarations + assigns + rest)


def dedupe_modules(text):
    """Return ``text`` with duplicate module definitions merged (see module docstring).

    Returns
    -------
    (str, int, int)
        The new text, the module count before and after.
    """
    matches = list(_MODULE.finditer(text))
    if not matches:
        return text, 0, 0
    prefix = text[:matches[0].start()]
    suffix = text[matches[-1].end():]
    modules = {}          # name -> [attributes, ports, body]
    for match in matches:
        modules[match.group(2)] = [match.group(1), match.group(3), match.group(4)]
    before = len(modules)
    while True:
        groups = {}
        for name, (attributes, ports, body) in modules.items():
            if "top" in attributes:
                continue
            port_key = ",".join(sorted(port.strip() for port in ports.split(",")))
            key = hashlib.sha256((port_key + "\n" + _canonical_body(name, body)).encode()
                                 ).hexdigest()
            groups.setdefault(key, []).append(name)
        replace = {}
        for names in groups.values():
            for duplicate in names[1:]:
                replace[duplicate] = names[0]
        if not replace:
            break
        for duplicate in replace:
            del modules[duplicate]
        for module in modules.values():
            for duplicate, keep in replace.items():
                # instantiation lines: "  \duplicate  instance_name ("
                module[2] = module[2].replace(f"  {duplicate}  ", f"  {keep}  ")
    out = [prefix]
    for name, (attributes, ports, body) in modules.items():
        out.append(f"{attributes}module {name} ({ports});\n{body}endmodule\n\n")
    out.append(suffix)
    return "".join(out), before, len(modules)
