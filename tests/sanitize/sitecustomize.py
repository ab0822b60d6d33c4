"""Run at start-up by a python whose PYTHONPATH holds <build>/python-sanitized
(KILN_SANITIZE=ON; see sanitized-python.in): `import kiln` must load the
sanitized kiln there.

An editable install (`make python`) puts an import hook at the head of
sys.meta_path, ahead of PYTHONPATH, that maps `kiln` to the normal build.
Every such hook that claims `kiln` is taken out, so the ordinary path search
finds the sanitized package first. Nothing else is touched: other editable
packages keep their hooks."""
import importlib.machinery
import sys


def _drop_kiln_import_hooks():
    for finder in list(sys.meta_path):
        if finder is importlib.machinery.PathFinder or not hasattr(finder, "find_spec"):
            continue
        try:
            spec = finder.find_spec("kiln", None)
        except Exception:  # a hook that cannot answer for kiln does not serve it
            continue
        if spec is not None:
            sys.meta_path.remove(finder)


_drop_kiln_import_hooks()
