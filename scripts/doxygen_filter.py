#!/usr/bin/env python3
"""doxygen_filter.py: Doxygen's INPUT_FILTER for include/recsdk/*.h (docs/Doxyfile).

Our public headers document with plain `//` comments (STYLE.md: a public member's comment starts
with its name), which Doxygen ignores. This filter turns them into Doxygen comments on the fly,
for Doxygen only; the headers stay as they are. Rules, chosen so that a comment attaches to the
thing it is written for and to nothing else:

- The file-top comment (the block on the first line, before the include guard) becomes the
  file's documentation (`\\file`).
- A block of `//` lines directly above a declaration (the next line is code: not blank, not a
  preprocessor line, not an access specifier, not a closing brace) becomes a `///` block, the
  documentation of that declaration (a `#define` counts as one). A block followed by a blank
  line, another `#` line or `}` is a note about the code around it and stays a plain comment.
- The comment above a declaration also documents the declarations right below it (no blank or
  comment line between) that it names: overloads of the first one's name ("Const: a constant
  tensor." above five Const overloads), and names followed by a colon, alone or as a list, at the
  comment's start or at the start of a line or sentence ("ReduceSum, ReduceMean, ReduceMax: ...",
  "fp_point / bp_point: ...", "... both. optypelist_for_implmode: ..."). That is how our headers
  already write one comment for several names. "Type a, b, c;" becomes a member group, so each of
  a, b and c gets the comment (DISTRIBUTE_GROUP_DOC in docs/Doxyfile).
- A trailing `// ...` after a member or enum value (the code ends in `;` or `,`) becomes `///<`,
  and `//` lines right below it, aligned with it, continue it. `// NOLINT` is not documentation.

Text is escaped (outside `code spans` and "quoted text", which Doxygen reads literally) so that
prose such as <feature>, #include, a & b or 100% is not read as HTML, a link request or a command.
The output has exactly the input's lines, so Doxygen's warnings point at the real line of the
header.

Usage (Doxygen appends the file name): doxygen_filter.py FILE > filtered text on stdout.
"""
import re
import sys

COMMENT = re.compile(r"^(\s*)//(?!/)(.*)$")
TRAILING = re.compile(r"^(\s*\S.*?[;,])(\s+)//(?!/)(.*)$")
# Doxygen's special characters, and "::" after a non-word character (an explicit link request).
ESCAPED = re.compile(r"([\\@<>&#%$]|(?<!\w)::)")


def escape(text):
    """Escapes Doxygen's special characters outside `code spans` and "quoted text" (Doxygen
    reads both literally). A line with an unmatched backtick or quote has no such span."""
    spans = re.split(r"(`[^`]*`|\"[^\"]*\")", text)
    if text.count("`") % 2 or sum(p.count('"') for p in spans[::2]) % 2:
        spans = [text]
    return "".join(p if i % 2 else ESCAPED.sub(r"\\\1", p) for i, p in enumerate(spans))


def is_code(line):
    """True for a line a comment above it documents: a declaration, not a note's neighbour."""
    s = line.strip()
    if s.startswith("#define"):
        return True
    if not s or s.startswith("#") or s.startswith("}") or s.startswith("//"):
        return False
    return not re.match(r"^(public|private|protected)\s*:", s)


def code_part(line):
    """The line without string literals and its trailing comment (for counting braces)."""
    line = re.sub(r'"(\\.|[^"\\])*"', '""', line)
    line = re.sub(r"'(\\.|[^'\\])*'", "''", line)
    return line.split("//", 1)[0]


def declaration_run(lines, i):
    """The declarations that follow a comment block at line i, up to the first blank, comment,
    preprocessor or access-specifier line or the scope's closing brace: the first lines of the
    declarations after the first."""
    starts = []
    depth, complete = 0, False
    while i < len(lines) and is_code(lines[i]) and not lines[i].lstrip().startswith("#"):
        code = code_part(lines[i]).rstrip()
        if depth == 0 and complete:
            starts.append(i)
        depth += code.count("{") - code.count("}")
        if depth < 0:
            break
        complete = depth == 0 and code.endswith((";", "}"))
        i += 1
    return starts


def declared_name(lines, k):
    """The name the declaration at line k declares (a function's, else a variable's or a
    type's); a template's is on the line after its `template <...>`."""
    while k + 1 < len(lines) and re.match(r"^\s*template\s*<.*>\s*$", lines[k]):
        k += 1
    code = code_part(lines[k])
    while re.search(r"<[^<>]*>", code):  # template arguments hold no declared name
        code = re.sub(r"<[^<>]*>", "", code)
    m = re.search(r"(operator\s*\S+?|~?\w+)\s*\(", code)
    v = re.search(r"(\w+)\s*(\[[^]]*\])?\s*=(?!=)", code)
    if v and "operator" not in code and (m is None or v.start() < m.start()):
        return v.group(1)  # a variable with an initializer that calls something
    if m:
        return m.group(1)
    m = re.search(r"(\w+)\s*(\[[^]]*\])?\s*(=|;|\{|,|(?<!:):(?!:))", code)
    return m.group(1) if m else None


# A comment names what it documents with a colon: "name: ...", "a / b: ...", "a, b (the spec's):
# ..." at its start, or such a name or list at the start of a line or a sentence.
NAME = r"(?:operator[-+*/=!<>\[\]()]+|~?\w+)"
NAMES = r"`?" + NAME + r"`?(?:\(\))?(?:\s*(?:,|/|and|or)\s*`?" + NAME + r"`?(?:\(\))?)*"
NAME_LIST = re.compile(r"^\s*(" + NAMES + r")\s*(?:\([^)]*\))?\s*:(?!:)")
NAMED_LATER = re.compile(r"(?:^\s*|[.;]\s+)(" + NAMES + r")\s*(?:\([^)]*\))?\s*:(?!:)")


def list_names(text):
    """The identifiers of a name list ("a, b and c")."""
    return re.findall(NAME, re.sub(r"\b(and|or)\b", " ", text))


def documented_names(block_texts, first_name):
    """The names a comment block documents: those it names with a colon (NAME_LIST,
    NAMED_LATER), and the first declaration's name when the comment opens with it."""
    names = set()
    m = NAME_LIST.match(" ".join(t.strip() for t in block_texts))
    if m:
        names.update(list_names(m.group(1)))
    for text in block_texts:
        for later in NAMED_LATER.findall(text):
            names.update(list_names(later))
    words = block_texts[0].split()
    if words and words[0].strip("`") == first_name:
        names.add(first_name)
    return names


def declarator_group(lines, i):
    """For a declaration of several variables at line i ("HookList a, b, c;", maybe over several
    lines), the index of its last line; else None."""
    code, k = "", i
    while k < len(lines):
        code += " " + code_part(lines[k])
        if code.rstrip().endswith(";") or any(c in code for c in "({}"):
            break
        k += 1
    while re.search(r"<[^<>]*>", code):
        code = re.sub(r"<[^<>]*>", "", code)
    if any(c in code for c in "({}=") or not code.rstrip().endswith(";"):
        return None
    return k if "," in code else None


def filter_lines(lines):
    out = list(lines)
    n = len(lines)
    i = 0
    trailing_col = None  # column of the previous line's trailing comment, for continuations
    while i < n:
        line = lines[i]
        m = COMMENT.match(line)
        if m is None:
            t = TRAILING.match(line)
            if t and not t.group(3).lstrip().startswith("NOLINT"):
                out[i] = f"{t.group(1)}{t.group(2)}///< {escape(t.group(3).lstrip())}"
                trailing_col = len(t.group(1)) + len(t.group(2))
            else:
                trailing_col = None
            i += 1
            continue
        # A continuation of the trailing comment above: same column.
        if trailing_col is not None and len(m.group(1)) == trailing_col:
            out[i] = f"{m.group(1)}///< {escape(m.group(2).lstrip())}"
            i += 1
            continue
        trailing_col = None
        start = i
        while i < n and COMMENT.match(lines[i]):
            i += 1
        block = range(start, i)
        file_top = start == 0
        if not file_top and not (i < n and is_code(lines[i])):
            continue
        for k in block:
            c = COMMENT.match(lines[k])
            out[k] = f"{c.group(1)}///{escape(c.group(2))}"
        if file_top:
            out[i - 1] += " \\file"
            continue
        # Several variables in one declaration: a member group, so that each gets the comment
        # (DISTRIBUTE_GROUP_DOC in docs/Doxyfile).
        last = declarator_group(lines, i)
        if last is not None:
            indent = re.match(r"^\s*", lines[i]).group(0)
            out[i] = f"{indent}/**@{{*/ {lines[i].lstrip()}"
            semi = out[last].index(";", len(re.match(r"^\s*", out[last]).group(0)))
            out[last] = f"{out[last][:semi + 1]} /**@}}*/{out[last][semi + 1:]}"
        # The declarations right below that the comment names share it (see the file comment).
        starts = declaration_run(lines, i)
        texts = [COMMENT.match(lines[k]).group(2) for k in block]
        names = documented_names(texts, declared_name(lines, i))
        starts = [k for k in starts if declared_name(lines, k) in names]
        if starts:
            text = " ".join(escape(COMMENT.match(lines[k]).group(2).strip()) for k in block)
            text = text.replace("*/", "* /")
            for k in starts:
                indent = re.match(r"^\s*", lines[k]).group(0)
                out[k] = f"{indent}/** {text} */ {lines[k].lstrip()}"
    return out


def main():
    with open(sys.argv[1], encoding="utf-8") as f:
        lines = f.read().split("\n")
    sys.stdout.write("\n".join(filter_lines(lines)))


if __name__ == "__main__":
    main()
