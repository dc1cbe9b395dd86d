"""Thin command-line tools: flags in, one validated config out."""
