"""What every Python test prints: one "ok - WHAT" or "not ok - WHAT" line per
check (TAP style, flushed so that it interleaves with the programs a test
runs), and an exit status that fails when any check did."""

failures = 0


def check(cond, what):
    global failures
    print(("ok - " if cond else "not ok - ") + what, flush=True)
    failures += not cond
    return cond


def exit_status():
    return 1 if failures else 0
