"""The full run: the trainer and its parts, the run in one call, torchrun, your own loop.

``trainer`` (``Trainer``: set-up, the loop, the result) with its parts beside it:
``batches``, ``checkpoint`` and ``run_folder``, ``checkpoint_state`` (what a checkpoint
holds), ``schedule``, ``evaluation``, ``log`` and ``progress`` (what the run says), ``stop``
(the signals), ``oom``, ``run_result``. ``run.train`` is the run in one call, ``launch`` decides
its arguments from a preset, ``distributed`` is the torchrun plumbing, ``loop`` hands a
preset's pieces to your own loop.
"""
