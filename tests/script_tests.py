"""The runner of the plain-Python test scripts (tests/test_tools.py, tests/test_cli.py): each test
is a function whose docstring's first line names it; Skip skips it with a reason."""
import shutil
import traceback


class Skip(Exception):
    pass


def run_tests(tests, tmp):
    """Runs every test, prints ok / SKIP / FAIL with the traceback and a count; removes tmp when
    none failed (else keeps it and says where). Returns the exit status (1 if any failed)."""
    failed = skipped = 0
    for t in tests:
        print(f"== {t.__name__}: {t.__doc__.splitlines()[0]}", flush=True)
        try:
            t()
            print("   ok", flush=True)
        except Skip as exc:
            skipped += 1
            print(f"   SKIP: {exc}", flush=True)
        except Exception:
            failed += 1
            print("   FAIL:\n" + traceback.format_exc(), flush=True)
    print(f"{len(tests) - failed - skipped} passed, {skipped} skipped, {failed} failed")
    if not failed:
        shutil.rmtree(tmp, ignore_errors=True)
    else:
        print(f"(temporary files kept in {tmp})")
    return 1 if failed else 0
