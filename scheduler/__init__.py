"""Tide: a quota-aware elastic GPU scheduler."""
