"""Where and how a step runs: replicas, estimators, host_call, progress.

`replicas`: cross-replica means and replica ids (TPU cores, mirrored devices
or one device) and the model weights' optimizer; `estimators`: RunConfig,
TPUEstimator, session configs and the strategy of several local devices;
`host_call`: summary packing for TPUEstimator's host_call; `placement`: the
host device beside an accelerator; `progress`: progress, step and checkpoint
logging hooks.
"""
