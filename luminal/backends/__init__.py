"""Backends: each turns an LLIR plan into something that runs (reference = numpy, cuda = GPU)."""
