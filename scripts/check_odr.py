#!/usr/bin/env python3
"""check_odr.py: fails when two headers define a class of the same name at namespace scope.

Two headers that both define recsdk::internal::RowStore compile and link without a word, and
the program then runs one class's inline members on the other's objects wherever the compiler
did not inline them (stop 19: SsdStore's destructor ran the pipeline's RowStore destructor at
-O0). Our headers put namespace members at column 0 (.clang-format: NamespaceIndentation None),
so a definition is a line starting with `class Name` or `struct Name` followed by `{`, `:` or
`final`; forward declarations, nested-name definitions (`struct X::Impl`) and specialisations
(`struct hash<...>`) are not. Names are compared per namespace path as far as the header's
`namespace a::b {` lines say.

  scripts/check_odr.py [root]     exit 1 and list the clashes, else print the count checked
"""
import pathlib
import re
import sys

DEF = re.compile(r"^(?:class|struct)\s+(?:\[\[[^\]]*\]\]\s+)?([A-Za-z_]\w*)\s*(?:final\s*)?(?:[:{]|$)")
NS_OPEN = re.compile(r"^namespace\s+([\w:]*)\s*\{")
NS_CLOSE = re.compile(r"^\}\s*//\s*namespace")


def definitions(path):
    stack = []
    for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
        m = NS_OPEN.match(line)
        if m:
            stack.append(m.group(1) or "<anonymous>")
            continue
        if NS_CLOSE.match(line) and stack:
            stack.pop()
            continue
        m = DEF.match(line)
        if not m or line.rstrip().endswith(";"):
            continue
        rest = line[m.end(1):].lstrip()
        if rest.startswith("::") or rest.startswith("<"):
            continue
        if "<anonymous>" in stack:
            continue
        yield "::".join(stack + [m.group(1)]), number


def main():
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".")
    seen = {}
    for folder in ("include", "src"):
        for path in sorted((root / folder).rglob("*.h")):
            for name, number in definitions(path):
                seen.setdefault(name, []).append(f"{path.relative_to(root)}:{number}")
    clashes = {name: where for name, where in seen.items() if len(where) > 1}
    for name, where in sorted(clashes.items()):
        print(f"check_odr: {name} is defined in {len(where)} headers: {', '.join(where)}; "
              "rename one (two definitions of one class break the one-definition rule)")
    if clashes:
        return 1
    print(f"check_odr: {len(seen)} namespace-scope classes in headers, each defined once")
    return 0


if __name__ == "__main__":
    sys.exit(main())
