"""Does the search work? Searched vs random architectures, one-shot vs stand-alone."""
