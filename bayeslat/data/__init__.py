"""Sweep data: the tidy table contract and the readers that produce it."""
