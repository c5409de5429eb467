#!/usr/bin/env python3
"""check_migration_doc.py: every spec name docs/migration.md maps to a recsdk call is exercised by
tests/migration/spec_names_test.cc (CTest docs_migration_names).

    python3 scripts/check_migration_doc.py [REPO_ROOT]

The doc's tables have two columns: the spec's names (each in `backticks`) and the recsdk call, or
"not applicable here, because ...". For every row that maps to a call, each backticked name of its
first column must be listed in the `.spec = {...}` of a case of the test; and every name the test
lists must be a name of such a row, so the two stay one list. Exit 1 naming what is missing;
standard library only.
"""
import re
import sys
from pathlib import Path

DOC = "docs/migration.md"
TEST = "tests/migration/spec_names_test.cc"
NOT_APPLICABLE = "not applicable here"


def cells(line):
    """The cells of a table row; `\\|` is a pipe inside a cell."""
    parts = re.split(r"(?<!\\)\|", line.strip())
    return [p.strip() for p in parts[1:-1]]


def doc_names(text):
    """(mapped, not_applicable): spec name -> line number, from the doc's table rows."""
    mapped, not_applicable = {}, {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.lstrip().startswith("|"):
            continue
        row = cells(line)
        if len(row) < 2 or set("".join(row)) <= set("-: ") or row[0] == "Spec":
            continue  # a separator or a header row
        target = not_applicable if row[1].lower().startswith(NOT_APPLICABLE) else mapped
        for name in re.findall(r"`([^`]+)`", row[0]):
            target.setdefault(name.replace("\\|", "|"), number)
    return mapped, not_applicable


def test_names(text):
    """Every name listed in a case's `.spec = {...}`."""
    names = set()
    for block in re.findall(r"\.spec\s*=\s*\{([^}]*)\}", text):
        names.update(re.findall(r'"((?:[^"\\]|\\.)*)"', block))
    return names


def main(argv):
    root = Path(argv[1]) if len(argv) > 1 else Path(__file__).resolve().parent.parent
    mapped, not_applicable = doc_names((root / DOC).read_text(encoding="utf-8"))
    tested = test_names((root / TEST).read_text(encoding="utf-8"))
    if not mapped:
        print(f"{DOC}: no row maps a spec name to a call; the check checks nothing")
        return 1
    errors = []
    for name, line in sorted(mapped.items(), key=lambda item: item[1]):
        if name not in tested:
            errors.append(f"{DOC}:{line}: `{name}` maps to a call but no case of {TEST} lists it "
                          "in its .spec: add a case that runs the call and checks what it does")
    for name in sorted(tested - set(mapped)):
        where = "a row that is not applicable" if name in not_applicable else "no row"
        errors.append(f"{TEST}: a case lists \"{name}\", which is {where} of {DOC}: add the row "
                      "or drop the name")
    for error in errors:
        print(error)
    if errors:
        return 1
    print(f"{DOC}: all {len(mapped)} spec names mapped to a call are exercised by {TEST} "
          f"({len(not_applicable)} not applicable)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
