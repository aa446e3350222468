"""The test suite's network guard (see loopback_guard.py); also loaded by child processes."""
