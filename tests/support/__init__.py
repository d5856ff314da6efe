"""Test support: real servers and helpers shared by the test suite and the benches."""
