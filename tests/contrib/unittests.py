"""desispec's own unittest tests, run for tests/contrib.rs.

    unittests.py NAME...

NAME is what `python3 -m unittest` takes (a module, class or method of
desispec.test). Prints on standard output `desispec PATH` (the package it
imported), then one line per test, `RESULT OUTCOME ID` with OUTCOME one of
ok, FAIL, ERROR, skip, xfail, xpass; unittest's own report goes to standard
error. Exits 0 whatever the outcomes: tests/contrib.rs reads the lines.
"""

import sys
import unittest


class Result(unittest.TextTestResult):
    """unittest's result, which also keeps each test's outcome in order."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.outcomes = []

    def addSuccess(self, test):
        super().addSuccess(test)
        self.outcomes.append(("ok", test.id()))

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self.outcomes.append(("FAIL", test.id()))

    def addError(self, test, err):
        super().addError(test, err)
        self.outcomes.append(("ERROR", test.id()))

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self.outcomes.append(("skip", test.id()))

    def addExpectedFailure(self, test, err):
        super().addExpectedFailure(test, err)
        self.outcomes.append(("xfail", test.id()))

    def addUnexpectedSuccess(self, test):
        super().addUnexpectedSuccess(test)
        self.outcomes.append(("xpass", test.id()))


def main(names):
    import desispec

    print("desispec", desispec.__file__, flush=True)
    suite = unittest.defaultTestLoader.loadTestsFromNames(names)
    runner = unittest.TextTestRunner(stream=sys.stderr, verbosity=2, resultclass=Result)
    result = runner.run(suite)
    sys.stdout.flush()
    for outcome, test in result.outcomes:
        print("RESULT", outcome, test)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
