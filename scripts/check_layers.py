#!/usr/bin/env python3
"""check_layers.py: fails when a part of src/ includes or calls a layer above its own.

The layers and what each holds are in src/layers.txt (DESIGN.md's picture, lowest first);
src/CMakeLists.txt builds one OBJECT library per layer from the same file. Two checks:

1. Includes. Every `#include "src/<path>"` in a .cc, .h or .inc under src/ must name a file of the
   including file's layer or of a layer below it.
2. Calls (with --objects FILE; the CTest `layers_include_and_call` passes the build's list). FILE
   has one line per compiled object, `<layer> <object path>`. A symbol an object leaves undefined
   that some object of the library defines must be defined in the object's layer or below it (a
   wrong-way call through a public header, recsdk/session.h from table/, is caught here: the
   include check sees only src/ paths). Symbols defined outside the library (absl, the standard
   library) are not ours and pass.

ALLOWED below lists the only exceptions, each with the reason. Output: every violation with
file, line or symbol and the fix; exit 1 if there is one, else a line of counts and exit 0.

  scripts/check_layers.py <repo root> [--objects FILE]
"""
import pathlib
import re
import subprocess
import sys

# (from layer, to layer): why the lower part may reach up. Keep this list short; every entry is a
# place where DESIGN.md itself says one part drives another.
ALLOWED = {
    # runtime.cc's InitializeRuntime is the runtime's one start-up call (DESIGN.md: "Backends
    # register by an explicit call at runtime start"): it names every built-in registration, the
    # collective ops of dist/ included, so that a graph holding AllReduceMean loads in any Session.
    # Only that file, only RegisterCollectiveOps (see ALLOWED_FILES).
    ("session", "dist"),
}
# The files of an allowed pair that may reach up; any other file of the layer may not.
ALLOWED_FILES = {
    ("session", "dist"): {"session/runtime.cc"},
}
ALLOWED_SYMBOLS = {
    ("session", "dist"): re.compile(r"RegisterCollectiveOps"),
}

INCLUDE = re.compile(r'^\s*#\s*include\s+"src/([^"]+)"')


def read_layers(root):
    layers = []  # (name, [paths])
    for line in (root / "src" / "layers.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, *paths = line.split()
            layers.append((name, paths))
    return layers


class LayerMap:
    def __init__(self, layers):
        self.rank = {name: i for i, (name, _) in enumerate(layers)}
        self.paths = sorted(((p.rstrip("/"), name) for name, ps in layers for p in ps),
                            key=lambda pn: -len(pn[0]))

    def of(self, rel):
        """The layer of src/<rel>, or None."""
        for path, name in self.paths:
            if rel == path or rel.startswith(path + "/"):
                return name
        return None


def allowed(frm, to, rel=None, symbol=None):
    pair = (frm, to)
    if pair not in ALLOWED:
        return False
    if rel is not None and rel not in ALLOWED_FILES.get(pair, {rel}):
        return False
    if symbol is not None and pair in ALLOWED_SYMBOLS:
        return bool(ALLOWED_SYMBOLS[pair].search(symbol))
    return True


def check_includes(root, lm):
    errors, count = [], 0
    src = root / "src"
    for f in sorted(src.rglob("*")):
        if f.suffix not in (".cc", ".h", ".inc") or not f.is_file():
            continue
        rel = f.relative_to(src).as_posix()
        frm = lm.of(rel)
        if frm is None:
            errors.append(f"src/{rel}: in no layer; add its folder to src/layers.txt")
            continue
        for number, line in enumerate(f.read_text(errors="replace").splitlines(), 1):
            m = INCLUDE.match(line)
            if not m:
                continue
            count += 1
            to = lm.of(m.group(1))
            if to is None:
                errors.append(f"src/{rel}:{number}: includes src/{m.group(1)}, in no layer")
            elif lm.rank[to] > lm.rank[frm] and not allowed(frm, to, rel=rel):
                errors.append(
                    f"src/{rel}:{number}: layer {frm} includes src/{m.group(1)} of layer {to}, "
                    f"which is above it (src/layers.txt); move the code it needs down to {frm} or "
                    f"below, or this code up to {to} or above")
    return errors, count


def nm(paths):
    """{path: (defined set, undefined set)} of global symbols, one nm run per 200 objects."""
    out = {p: (set(), set()) for p in paths}
    for i in range(0, len(paths), 200):
        chunk = paths[i:i + 200]
        text = subprocess.run(["nm", "-A", "-g", "--no-sort"] + chunk, check=True,
                              capture_output=True, text=True).stdout
        for line in text.splitlines():
            # "<path>:<address> <type> <name>" or "<path>:                 U <name>"
            path, _, rest = line.partition(":")
            parts = rest.split()
            if len(parts) < 2 or path not in out:
                continue
            kind, name = parts[-2], parts[-1]
            if kind == "U":
                out[path][1].add(name)
            else:
                out[path][0].add(name)
    return out


def demangle(names):
    try:
        text = subprocess.run(["c++filt"], input="\n".join(names), check=True,
                              capture_output=True, text=True).stdout
        return text.splitlines()
    except (OSError, subprocess.CalledProcessError):
        return names


def check_calls(objects_file, lm):
    rows = []
    for line in pathlib.Path(objects_file).read_text().splitlines():
        if line.strip():
            layer, path = line.split(None, 1)
            rows.append((layer, path.strip()))
    symbols = nm([p for _, p in rows])
    lowest = {}  # symbol -> lowest rank of a layer defining it
    for layer, path in rows:
        for s in symbols[path][0]:
            r = lm.rank[layer]
            if r < lowest.get(s, len(lm.rank)):
                lowest[s] = r
    names = {r: n for n, r in lm.rank.items()}
    bad = []  # (object, layer, symbol, defining layer)
    for layer, path in rows:
        for s in symbols[path][1]:
            r = lowest.get(s)
            if r is not None and r > lm.rank[layer]:
                bad.append((path, layer, s, names[r]))
    pretty = demangle([s for _, _, s, _ in bad])
    errors = []
    for (path, layer, _, to), s in zip(bad, pretty):
        if allowed(layer, to, symbol=s):
            continue
        obj = re.sub(r".*\.dir/", "", path)
        errors.append(f"{obj} (layer {layer}) calls {s}, defined only in layer {to} above it "
                      f"(src/layers.txt); move the callee down or the caller up")
    return errors, len(rows)


def main(argv):
    if len(argv) < 2:
        print(__doc__)
        return 2
    root = pathlib.Path(argv[1]).resolve()
    lm = LayerMap(read_layers(root))
    errors, includes = check_includes(root, lm)
    objects = 0
    if "--objects" in argv:
        call_errors, objects = check_calls(argv[argv.index("--objects") + 1], lm)
        errors += call_errors
    for e in errors:
        print(e)
    if errors:
        print(f"{len(errors)} wrong-way include(s) or call(s)")
        return 1
    print(f"layers: {len(lm.rank)}; {includes} src/ includes and {objects} objects' calls checked, "
          "none points up")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
