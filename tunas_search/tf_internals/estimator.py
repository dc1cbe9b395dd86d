"""What the estimator's hooks keep in protected members."""

import tensorflow as tf


def set_steps_per_run(hook: tf.compat.v1.train.SessionRunHook,
                      steps: int) -> None:
  """Tells a CheckpointSaverHook that one session run is `steps` steps.

  On TPU a session run is a whole host loop; the hook then saves at the
  first run that reaches a multiple of its interval.
  """
  hook._set_steps_per_run(steps)  # pylint: disable=protected-access
