"""The demo's plug-in (entry point `speechlm.plugins: demo`, loaded by speechlm.plugins.load): the
built-in espeak-ng corpora as shard source kinds, `synthetic` (grammar sentences, the listening
corpus, non-speech clips), `timed` (words with true times) and `multilingual` (one language of the
multilingual listening corpus).

The demo's eval parts need no registration: a clip's part is named in its id (speechlm.scoring.by_part).
"""

from speechlm.demo.multilingual_source import Multilingual
from speechlm.demo.synthetic_source import Synthetic
from speechlm.demo.timed_source import Timed
from speechlm.shard.sources import register

register(Synthetic())
register(Timed())
register(Multilingual())
