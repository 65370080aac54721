"""absl's app.run, with --help exiting 0: absl prints the usage and exits 1, which breaks a shell script that
probes a command with --help."""

import sys

from absl import app

HELP_FLAGS = ("-?", "-h", "-help", "--help", "--helpshort", "--helpfull", "--helpxml")


def run(main):
    try:
        app.run(main)
    except SystemExit as e:
        if e.code == 1 and any(a.split("=")[0] in HELP_FLAGS for a in sys.argv[1:]):
            sys.exit(0)  # the usage was printed: what was asked
        raise
