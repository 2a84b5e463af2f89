"""The seed's signatures (``ejkernel.modules``' public functions) as JSON, for
test_signatures.py: run with the interpreter where ``ejkernel`` is installed.

    /work/venvs/seed/bin/python python/tests/seed_signatures.py > python/tests/seed_signatures.json

Each parameter: its name, kind (inspect's name for it) and default, as JSON where the default is
a JSON value (``literal``) and always as its repr (``repr``), so framework objects (a
``Precision``, a dtype) compare by their text.
"""
import inspect
import json
import sys

_LITERALS = (type(None), bool, int, float, str)


def _default(value):
    if value is inspect.Parameter.empty:
        return None
    entry = {"repr": repr(value)}
    if isinstance(value, _LITERALS) or (isinstance(value, tuple) and all(isinstance(v, _LITERALS) for v in value)):
        entry["literal"] = list(value) if isinstance(value, tuple) else value
    return entry


def describe(fn):
    return [{"name": p.name, "kind": p.kind.name, "default": _default(p.default)}
            for p in inspect.signature(fn).parameters.values()]


def main():
    import ejkernel
    import ejkernel.modules as modules
    ops = {}
    for name in sorted(dir(modules)):
        fn = getattr(modules, name)
        if name.startswith("_") or not inspect.isfunction(fn) or not name.islower():
            continue
        ops[name] = describe(fn)
    json.dump({"ejkernel": ejkernel.__version__, "ops": ops}, sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
