"""DeepSpeed ZeRO trainer: `main(argv)` is what `launch/train.py` runs (see loop.py for exit codes)."""


def main(argv=None) -> int:
    from speechlm.train.loop import main as _main  # the loop pulls deepspeed: `speechlm.train.x` stays light

    return _main(argv)


__all__ = ["main"]
