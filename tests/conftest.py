"""Settings every test module shares.

Hypothesis's per-example deadline (200 ms by default) is a timed assertion: on a loaded 2-core machine a property
test failed on it ("DeadlineExceeded") while its property held. Speed is shown by benchmarks, so no test has one.
"""

from hypothesis import settings

settings.register_profile("gpusched", deadline=None)
settings.load_profile("gpusched")
