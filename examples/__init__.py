"""Runnable examples: a custom search space and a generated image folder."""
