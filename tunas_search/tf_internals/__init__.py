"""TensorFlow's internals, behind one door.

Everything of the project that goes past TensorFlow's public API is in this
package (docs/DESIGN.md, "TensorFlow internals"): imports of its private
modules (`tensorflow.python`, `tensorflow.compiler`, ...), gradient overrides
of its core ops, and calls of protected members of its objects.
tests/test_import_rules.py refuses them anywhere else. TensorFlow is pinned
to 2.15 (requirements/cpu.txt); tests/tf_internals/ fails where one of these
moves.

  dead_gradients  dead, not zero, gradients of the weights a step leaves
                  unused; the op switches' Merge and Switch gradients
  graph           building outside a control-flow context; a control input
                  added to an op that exists
  estimator       a checkpoint hook's steps per session run (TPU host loops);
                  the checkpoint hook that writes the graph once
  xla             the replica id on TPU cores; `xla.compile`
"""
