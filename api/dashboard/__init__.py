"""Tide package."""
