"""The module import graph of src/raptor, read with ast (no imports run), and its drawing.

`import_graph` gives, for every module of the package, the raptor modules it imports (at module
level or inside functions) and the underscore names it takes from them. `python
benchmarks/structure.py` draws the package-level graph (subpackages and top-level modules) to
docs/img/structure.png and prints any module-level cycle; tests/test_structure.py asserts there is
none.
"""

from __future__ import annotations

import argparse
import ast
from dataclasses import dataclass, field
from pathlib import Path

from raptor.figures import save_figure

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"


@dataclass
class ModuleImports:
    path: Path
    imports: set[str] = field(default_factory=set)  # raptor modules imported
    private: list[tuple[str, str, int]] = field(default_factory=list)  # (module, name, line)


def module_name(path: Path, src: Path = SRC) -> str:
    parts = list(path.relative_to(src).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _resolve(mod: str, node: ast.ImportFrom, is_pkg: bool) -> str:
    """Absolute module of a from-import (relative imports resolved against `mod`)."""
    if not node.level:
        return node.module or ""
    base = mod.split(".") if is_pkg else mod.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def import_graph(src: Path = SRC, package: str = "raptor") -> dict[str, ModuleImports]:
    """Every module of `package` under `src` with the package modules it imports."""
    files = sorted((src / package).rglob("*.py"))
    mods = {module_name(p, src): ModuleImports(p) for p in files}
    for name, info in mods.items():
        tree = ast.parse(info.path.read_text(), str(info.path))
        is_pkg = info.path.name == "__init__.py"
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.name in mods:
                        info.imports.add(a.name)
            elif isinstance(node, ast.ImportFrom):
                target = _resolve(name, node, is_pkg)
                for a in node.names:
                    sub = f"{target}.{a.name}"
                    if sub in mods:  # `from package import module`
                        info.imports.add(sub)
                    elif target in mods:
                        info.imports.add(target)
                        if a.name.startswith("_") and not a.name.startswith("__"):
                            info.private.append((target, a.name, node.lineno))
        info.imports.discard(name)
    return mods


def cycles(mods: dict[str, ModuleImports]) -> list[list[str]]:
    """The module import cycles (strongly connected components of more than one module)."""
    import networkx as nx

    g = nx.DiGraph([(m, t) for m, info in mods.items() for t in info.imports])
    return [sorted(c) for c in nx.strongly_connected_components(g) if len(c) > 1]


def package_of(mod: str, depth: int = 2) -> str:
    """`raptor.spatial.noc` -> `raptor.spatial`; top-level modules stay themselves."""
    return ".".join(mod.split(".")[:depth])


def draw(mods: dict[str, ModuleImports], out: Path) -> None:
    """Draw the package dependency graph (one node per subpackage or top-level module, an edge
    per import between them, weighted by the number of module imports) to `out`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import networkx as nx

    g = nx.DiGraph()
    for m, info in mods.items():
        a = package_of(m)
        g.add_node(a)
        for t in info.imports:
            b = package_of(t)
            if a != b and b != "raptor":
                w = g.get_edge_data(a, b, {"weight": 0})["weight"]
                g.add_edge(a, b, weight=w + 1)
    g.remove_nodes_from([n for n in list(g) if n == "raptor"])
    layers = {}
    for depth, gen in enumerate(nx.topological_generations(g.reverse())):
        for n in gen:
            layers[n] = depth
    nx.set_node_attributes(g, layers, "layer")
    pos = nx.multipartite_layout(g, subset_key="layer", align="horizontal")
    fig, ax = plt.subplots(figsize=(13, 8))
    nx.draw_networkx_edges(
        g,
        pos,
        ax=ax,
        node_size=2200,
        arrowstyle="-|>",
        arrowsize=12,
        edge_color="#8a8a8a",
        width=0.8,
        connectionstyle="arc3,rad=0.06",
    )
    nx.draw_networkx_nodes(g, pos, ax=ax, node_color="#cde", node_size=2200, edgecolors="#468")
    nx.draw_networkx_labels(g, pos, {n: n.removeprefix("raptor.") for n in g}, ax=ax, font_size=9)
    ax.set_title(
        "src/raptor: subpackages and top-level modules\narrow A -> B: A imports B (at module "
        "level or in a function); no cycles, so every arrow points to a lower row"
    )
    ax.axis("off")
    save_figure(fig, out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "docs" / "img" / "structure.png"))
    args = ap.parse_args()
    mods = import_graph()
    for c in cycles(mods):
        print("module cycle:", " <-> ".join(c))
    for m, info in mods.items():
        for t, n, line in info.private:
            print(f"{info.path.relative_to(ROOT)}:{line}: {m} imports {t}.{n}")
    draw(mods, Path(args.out))
    print(args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
