"""The offline demo, end to end with nothing from the Hub (`make demo`, `speechlm demo`), in one package.

The core never imports it: it plugs in through the `speechlm.plugins` entry point (`plugin.py`,
loaded by speechlm.plugins.load), which registers its shard source kinds. Importing this package
imports nothing else, so loading the plug-in stays cheap.

- stages.py: the demo's stages (shards, weights, training, transcription, word times, plots);
  `speechlm demo` (speechlm/commands/demo.py) and `python -m speechlm.demo` run them.
- grammar.py: the built-in grammar (52 words, 15 sentence shapes, held-out words), distinct
  sentences per split, espeak-ng speech, and `SyntheticConfig`, the `synthetic:` section.
- corpus.py: the listening corpus (random word orders and sentences; test parts seen, unseen, random).
- nonspeech.py: silence, noise, tones and clicks with empty labels.
- builtin.py: a `kind: synthetic` source's rows and audio by its `synthetic.corpus`.
- timed.py: words spoken one by one with true times, and `TimedConfig`, the `timed:` section.
- synthetic_source.py, timed_source.py: the `synthetic` and `timed` source types (speechlm.shard.sources).
- listening.py: the human labels of the corpus's parts, and the summary lines the demo prints.
"""
