"""The Twinkle plugin of twinkle-audio, found through the ``twinkle`` entry-point group.

It provides MeloTTS-style text-to-speech algorithms (a VITS2 model with tone and language embeddings) and speech data processors. It registers no components yet: they arrive with the audio issue.

Like every Twinkle plugin module it imports nothing heavy at its top level.
"""

from __future__ import annotations
