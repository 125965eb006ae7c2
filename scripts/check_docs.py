#!/usr/bin/env python3
"""scripts/check_docs.py -- the docs cannot drift from the tree. In README.md,
docs/ARCHITECTURE.md, docs/CONTRIBUTING.md and docs/CI.md:

- every path they name under one of the project's folders exists (brace lists are expanded,
  `*` must match something, a program may be named as its source without `.cpp`, and
  placeholders like `tests/ir/<pass>/` or `cuda/model/NAME` are skipped);
- every count they state of what the source lists matches it: "N ops" (runtime/ops.def),
  "N passes" (ir/passes.def), "N fuzz targets" (tools/fuzz/*_fuzz.cpp), the number written
  in digits or as a word right before the noun. Another count says another noun: "5 full-size
  passes", "two kernel passes".

Exits 1 naming each file, line and what is wrong. `scripts/check_docs.py DIR` checks the tree
at DIR (the tests plant stale docs in a copy)."""
import glob
import os
import re
import sys

DOCS = ["README.md", "docs/ARCHITECTURE.md", "docs/CONTRIBUTING.md", "docs/CI.md"]
ROOTS = ("runtime autograd ir codegen jit cuda distributed nn tools tests scripts benchmarks examples "
         "docs cmake kiln .ci").split()
PATH = re.compile(r"(?<![\w./@-])((?:%s)/[\w./{},*<>+-]*)" % "|".join(re.escape(r) for r in ROOTS))
WORDS = {w: i for i, w in enumerate(
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
    "sixteen seventeen eighteen nineteen twenty".split())}
COUNT = re.compile(r"(?<![\d,.])\b(\d+|%s) (ops|passes|fuzz targets)\b" % "|".join(WORDS), re.IGNORECASE)


def expand(token):
    """`a/{b,c}.{h,cpp}` as its paths."""
    m = re.search(r"\{([^{}]*)\}", token)
    if not m:
        return [token]
    return [p for alt in m.group(1).split(",") for p in expand(token[:m.start()] + alt + token[m.end():])]


def counts(root):
    with open(os.path.join(root, "runtime/ops.def")) as f:
        ops = sum(1 for line in f if line.startswith("OP("))
    with open(os.path.join(root, "ir/passes.def")) as f:
        passes = sum(1 for line in f if line.startswith("PASS("))
    fuzz = len(glob.glob(os.path.join(root, "tools/fuzz/*_fuzz.cpp")))
    return {"ops": ops, "passes": passes, "fuzz targets": fuzz}


def check(root):
    problems = []
    want = counts(root)
    for doc in DOCS:
        path = os.path.join(root, doc)
        if not os.path.exists(path):
            continue
        with open(path) as f:
            for n, line in enumerate(f, 1):
                for token in PATH.findall(line):
                    token = token.rstrip(".,:;)")
                    if "<" in token or ">" in token or re.search(r"(^|/)[A-Z]{2,}(/|$)", token):
                        continue  # a placeholder: tests/ir/<pass>/, cuda/model/NAME/...
                    for p in expand(token):
                        full = os.path.join(root, p)
                        # (a program is named as its source: examples/generate)
                        found = glob.glob(full) if "*" in p else os.path.exists(full) or os.path.exists(full + ".cpp")
                        if not found:
                            problems.append(f"{doc}:{n}: names {p}, which does not exist")
                for number, noun in COUNT.findall(line):
                    said = int(number) if number.isdigit() else WORDS[number.lower()]
                    if said != want[noun.lower()]:
                        problems.append(f"{doc}:{n}: says {number} {noun}; the source has {want[noun.lower()]}")
    return problems


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    problems = check(root)
    for p in problems:
        print(f"check_docs: {p}")
    if problems:
        return 1
    print(f"check_docs: ok ({', '.join(f'{v} {k}' for k, v in counts(root).items())})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
