"""The command line shared by the GPU check scripts (torch_libs_check.py,
jax_check.py): `--json OUT.json [--only NAME]... [--list]`. The harness
(run-torch-libs.sh) runs each check in a process of its own and names one file for all:
what earlier processes recorded is kept, and the file is written after every check, so
a run cut short by its time limit keeps what it did."""
import argparse
import json
import traceback


def main(checks, results, describe):
    """Run `checks` (functions that record into `results`); `describe()` adds the
    framework's version and the device's name to `results`."""
    p = argparse.ArgumentParser()
    p.add_argument("--json", required=True)
    p.add_argument("--only", action="append", help="run only these checks (repeatable)")
    p.add_argument("--list", action="store_true", help="print the checks' names and stop")
    args = p.parse_args()
    if args.list:
        print(" ".join(fn.__name__ for fn in checks))
        return
    try:
        for key, value in json.load(open(args.json)).items():
            if isinstance(value, dict):
                results[key].update(value)
    except (OSError, ValueError):
        pass
    describe()
    for fn in checks:
        name = fn.__name__
        if args.only and name not in args.only:
            continue
        try:
            fn()
        except Exception as e:  # a failing check is a result, not the end of the run
            results["checks"][name] = "ERROR"
            results["errors"][name] = f"{type(e).__name__}: {str(e)[:400]}"
            traceback.print_exc()
        print(f"{name}: {results['checks'][name]}", flush=True)
        json.dump(results, open(args.json, "w"), indent=1)
