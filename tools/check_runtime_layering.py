#!/usr/bin/env python3
"""Check the one-way rule inside runtime/, between its sub-folders.

../shared/tools/check_layering.py checks the rule between the top-level
folders (runtime/ uses none of them) and is read-only here; this is its
extension one level down, run beside it by `make test`. Each sub-folder of
runtime/ is a library (runtime/CMakeLists.txt) and may include only the
sub-folders MAY_USE names; a source file directly in runtime/ has no layer
and is refused, so a new file has to choose one.
Usage: check_runtime_layering.py [REPO_ROOT]   (default: current directory)
Exit status 1 when a forbidden include or a file without a layer is found.
"""
import os
import re
import sys

# Bottom to top; docs/architecture.md ("runtime/ by concern") says what each
# holds. The kinds whose behaviour lives above semantics/ (tensors, modules)
# are reached from it through semantics/kind_slots.h, which tensor/ and nn/
# fill, never by an include.
MAY_USE = {
    "base": set(),
    "value": {"base"},
    "kernels": {"base", "value"},
    "semantics": {"base", "value"},
    "tensor": {"base", "value", "kernels", "semantics"},
    "nn": {"base", "value", "kernels", "semantics", "tensor"},
}
SOURCE = (".h", ".cpp", ".def", ".inc")
INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]runtime/([^>"]+)[>"]', re.M)


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else ".")
    runtime = os.path.join(root, "runtime")
    bad = []
    checked = 0
    for name in sorted(os.listdir(runtime)):
        path = os.path.join(runtime, name)
        if os.path.isfile(path) and name.endswith(SOURCE):
            bad.append(f"runtime/{name}: directly in runtime/; put it in the sub-folder of its layer")
    for layer in sorted(MAY_USE):
        folder = os.path.join(runtime, layer)
        for name in sorted(os.listdir(folder)):
            if not name.endswith(SOURCE):
                continue
            checked += 1
            text = open(os.path.join(folder, name), encoding="utf-8").read()
            for m in INCLUDE.finditer(text):
                target = m.group(1).split("/")[0]
                if "/" not in m.group(1) or target not in MAY_USE:
                    bad.append(f"runtime/{layer}/{name}: includes runtime/{m.group(1)}, which has no layer")
                elif target != layer and target not in MAY_USE[layer]:
                    line = text.count("\n", 0, m.start()) + 1
                    bad.append(f"runtime/{layer}/{name}:{line}: {layer}/ includes runtime/{m.group(1)} "
                               f"from {target}/, which {layer}/ may not use")
    for b in bad:
        print(b)
    print(f"runtime layering: {len(bad)} problem(s) in {checked} files of {len(MAY_USE)} layers")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
