"""How often each jitted helper (sampling, the bound) was traced, by name: a Python side effect of tracing, counted
where each is traced and read by the tests that check a run compiles each program once."""

import collections

TRACES: collections.Counter = collections.Counter()  # name -> times traced
