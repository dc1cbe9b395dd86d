"""What the estimator's checkpoint hook keeps in protected members."""

import tensorflow as tf

tf1 = tf.compat.v1


def set_steps_per_run(hook: tf1.train.SessionRunHook, steps: int) -> None:
  """Tells a CheckpointSaverHook that one session run is `steps` steps.

  On TPU a session run is a whole host loop; the hook then saves at the
  first run that reaches a multiple of its interval.
  """
  hook._set_steps_per_run(steps)  # pylint: disable=protected-access


class EventsOnceSaverHook(tf1.train.CheckpointSaverHook):
  """TensorFlow's checkpoint hook, without rewriting the graph every start.

  The estimator's own saver hook adds the graph and its meta graph to a new
  events file on every start (tens of MB for a full search space) and writes
  `graph.pbtxt` and a `.meta` file next to every checkpoint. This one writes
  the graph to the events only when asked (`write_graph`, a run's first
  start), never writes `graph.pbtxt` or `.meta` files, and flushes the
  events at every checkpoint, so what was logged up to a checkpoint survives
  a kill. At the start it saves the restored step only where
  `saved_at_start(step)` is False (subclasses say which steps are saved).
  """

  def __init__(self, model_dir: str, save_steps: int, write_graph: bool,
               steps_per_run: int = 1):
    super().__init__(model_dir, save_steps=save_steps, save_graph_def=False)
    self._model_dir = model_dir
    self._write_graph = write_graph
    if steps_per_run > 1:
      set_steps_per_run(self, steps_per_run)

  def saved_at_start(self, step: int) -> bool:
    """Whether a checkpoint already holds `step` when a session starts."""
    del step
    return False

  def begin(self):
    # Not the base class's: its cached writer is created with the graph,
    # which writes the graph into every new process's events file.
    self._summary_writer = tf1.summary.FileWriter(self._model_dir)
    self._global_step_tensor = tf1.train.get_global_step()
    if self._global_step_tensor is None:
      raise RuntimeError('a checkpoint saver needs a global step')
    for listener in self._listeners:
      listener.begin()

  def after_create_session(self, session, coord):
    del coord
    step = session.run(self._global_step_tensor)
    if self._write_graph:
      self._summary_writer.add_graph(tf1.get_default_graph())
    if not self.saved_at_start(step):
      self._save(session, step)
    self._timer.update_last_triggered_step(step)

  def _save(self, session, step):
    should_stop = super()._save(session, step)
    self._summary_writer.flush()
    return should_stop

  def end(self, session):
    super().end(session)
    self._summary_writer.close()
