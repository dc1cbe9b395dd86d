"""Where the ops of a step are placed: the host CPU beside an accelerator."""

HOST = '/device:CPU:0'
