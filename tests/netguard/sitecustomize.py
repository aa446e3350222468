"""Loaded by every Python child process of the test suite (conftest puts this folder on
PYTHONPATH): the same loopback-only guard as in the test process."""

import loopback_guard

loopback_guard.install()
