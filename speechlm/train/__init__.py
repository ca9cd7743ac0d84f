"""DeepSpeed ZeRO trainer: `Trainer(cfg).run()` (loop.py, with its exit codes) is what `speechlm train`
(speechlm/commands/train.py) and `launch/train.py` run. Importing this package imports nothing:
the loop pulls deepspeed only when a run starts."""
