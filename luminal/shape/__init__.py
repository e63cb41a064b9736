"""Symbolic shapes: expressions over dim symbols and the index variable z, and view trackers."""
