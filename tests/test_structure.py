"""The code's shape, measured from its syntax trees (docs/architecture.md, "Layers").

* no function over :data:`MAX_FUNCTION_LINES` lines and no module over
  :data:`MAX_MODULE_LINES` lines in ``hdl/`` and ``software/rdu/``;
* no import cycle between modules (every import counts, also those inside functions,
  and importing ``a.b.c`` imports the package ``a.b``; imports under
  ``if TYPE_CHECKING:`` do not);
* layers point one way: ``hdl`` imports no ``rdu``, the ``rdu`` package imports no test
  harness (``tb``, ``tests``), and only the applications import ``rdu.apps``;
* no private name (leading underscore) is imported from another module;
* passes dispatch on a kernel family object, never on a family name string;
* ``pyproject.toml`` installs the product packages and not the test harness;
* the layers of ``docs/architecture.md`` (:data:`LAYERS`) point one way.

Run alone: ``python -m pytest tests/test_structure.py -q``; a failure lists every place.
"""

import ast
import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = {"hdl": ROOT / "hdl", "rdu": ROOT / "software" / "rdu"}
MAX_FUNCTION_LINES = 120
MAX_MODULE_LINES = 800


def _modules():
    """``{dotted name: path}`` of every Python module of the product packages."""
    found = {}
    for package, base in PACKAGES.items():
        for path in sorted(base.rglob("*.py")):
            parts = path.relative_to(base).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join((package,) + parts)] = path
    return found


MODULES = _modules()
TREES = {name: ast.parse(path.read_text(), str(path)) for name, path in MODULES.items()}


def _type_checking_nodes(tree):
    skipped = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped.update(id(child) for child in ast.walk(node))
    return skipped


def _imports(name):
    """``[(imported module, [names], line)]`` of module ``name`` (relative imports
    resolved; ``from package import module`` resolves to the module)."""
    tree = TREES[name]
    skipped = _type_checking_nodes(tree)
    is_package = MODULES[name].name == "__init__.py"
    result = []
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            result += [(alias.name, [], node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = name.split(".")
                base = parts if is_package else parts[:-1]
                base = base[:len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module
            result.append((target, [alias.name for alias in node.names], node.lineno))
    return result


def _edges():
    """``{module: {imported project module}}`` over the product packages."""
    edges = {name: set() for name in MODULES}
    for name in MODULES:
        for target, names, _ in _imports(name):
            candidates = [f"{target}.{item}" for item in names] + [target]
            for candidate in candidates:
                while candidate and candidate not in MODULES:
                    candidate = candidate.rpartition(".")[0]
                if candidate and candidate != name:
                    edges[name].add(candidate)
                # importing a.b.c runs the package a.b's __init__ first
                while "." in candidate:
                    candidate = candidate.rpartition(".")[0]
                    if candidate in MODULES and not _is_package_of(candidate, name):
                        edges[name].add(candidate)
    return edges


def _cycles(edges):
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, result = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in sorted(edges[node]):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                item = stack.pop()
                on_stack.discard(item)
                component.append(item)
                if item == node:
                    break
            if len(component) > 1:
                result.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return result


def _is_package_of(package, module):
    return module == package or module.startswith(package + ".")


def test_no_function_over_the_limit():
    long = []
    for name, tree in TREES.items():
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long.append(f"{MODULES[name].relative_to(ROOT)}:{node.lineno} "
                                f"{node.name}: {lines} lines")
    assert not long, "functions over the limit:\n" + "\n".join(long)


def test_no_module_over_the_limit():
    long = [f"{path.relative_to(ROOT)}: {len(path.read_text().splitlines())} lines"
            for path in MODULES.values()
            if len(path.read_text().splitlines()) > MAX_MODULE_LINES]
    assert not long, "modules over the limit:\n" + "\n".join(long)


def test_no_import_cycle():
    cycles = _cycles(_edges())
    assert not cycles, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def test_cycle_finder_finds_a_cycle():
    """The check above can fail: a two-module cycle and a three-module one are found."""
    edges = {"a": {"b"}, "b": {"a"}, "c": {"d"}, "d": {"e"}, "e": {"c"}, "f": {"a"}}
    assert sorted(_cycles(edges)) == [["a", "b"], ["c", "d", "e"]]


def test_layers_point_one_way():
    wrong = []
    for name in MODULES:
        for target, _, line in _imports(name):
            where = f"{MODULES[name].relative_to(ROOT)}:{line}"
            if name.startswith("hdl") and _is_package_of("rdu", target):
                wrong.append(f"{where}: hdl imports {target}")
            if target.split(".")[0] in ("tb", "tests"):
                wrong.append(f"{where}: product code imports the test harness {target}")
            if (_is_package_of("rdu.apps", target) and not _is_package_of("rdu.apps", name)
                    and not _is_package_of("rdu.cli", name)):
                wrong.append(f"{where}: {name} (below the applications) imports {target}")
    assert not wrong, "\n".join(wrong)


def test_no_private_name_crosses_modules():
    crossing = []
    for name in MODULES:
        for target, names, line in _imports(name):
            private = [item for item in names if item.startswith("_")]
            if private and target.split(".")[0] in PACKAGES:
                crossing.append(f"{MODULES[name].relative_to(ROOT)}:{line}: "
                                f"{', '.join(private)} from {target}")
    assert not crossing, "private names imported:\n" + "\n".join(crossing)


def test_no_kernel_family_string_tests():
    pattern = re.compile(r"pattern ?(==|!=|in) ")
    found = [f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
             for name, path in MODULES.items() if name.startswith("rdu")
             for number, line in enumerate(path.read_text().splitlines(), 1)
             if pattern.search(line)]
    assert not found, "\n".join(found)


def test_every_product_package_is_installed_and_nothing_else():
    """pyproject.toml installs exactly the product packages (the test harness is not)."""
    setup = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    packages = {name for name, path in MODULES.items() if path.name == "__init__.py"}
    packages.add("sim_models")
    assert set(setup["packages"]) == packages


#: The layers of docs/architecture.md ("Layers"), lowest first: a module imports only
#: modules of its own layer or below (the longest matching prefix places a module).
LAYERS = (
    ("hdl",),
    ("rdu", "rdu.bitstream", "rdu.memory_map", "rdu.ir", "rdu.mapper", "rdu.affine",
     "rdu.unitconfig", "rdu.schedule", "rdu.frontend", "rdu.frontend.graph"),
    ("rdu.models", "rdu.units", "rdu.machine", "rdu.program", "rdu.layout", "rdu.relocate",
     "rdu.frontend.attention"),
    ("rdu.compiler",),
    ("rdu.frontend.kernels", "rdu.frontend.gemm", "rdu.onnx"),
    ("rdu.sim",),
    ("rdu.runtime",),
    ("rdu.apps", "rdu.cli"),
)


def _layer(module):
    best = None
    for index, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            if _is_package_of(prefix, module) and (best is None or len(prefix) > best[1]):
                best = (index, len(prefix))
    return best[0] if best else None


def test_layers_in_order():
    """Every module sits in a layer, and none imports a module of a higher layer."""
    unplaced = sorted(name for name in MODULES if _layer(name) is None)
    assert not unplaced, f"modules in no layer of LAYERS: {unplaced}"
    upward = [f"{name} (layer {_layer(name)}) imports {target} (layer {_layer(target)})"
              for name, targets in sorted(_edges().items()) for target in sorted(targets)
              if _layer(target) > _layer(name)]
    assert not upward, "\n".join(upward)
