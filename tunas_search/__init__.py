"""tunas_search: TuNAS-style neural architecture search for mobile image classifiers."""

__version__ = '0.1.0'
