"""``SpeechDataProcessor``: a voice corpus at any fsspec URI — a folder of audio files and a transcript —
checked clip by clip, read into phones (the language's front end) and mono audio at the model's rate.

Transcripts, in the folder (or given as the URI):

- ``metadata.csv`` as ``id|text`` (LJSpeech's ``id|text|normalized text`` too: the last field is read); the audio
  is ``<id>.<wav|flac|ogg|mp3>`` beside it or under ``wavs/``;
- MeloTTS's filelist (``*.list`` or ``filelist.txt``) as ``path|speaker|language|text``, paths relative to it.

Each clip is decoded with soundfile, averaged to mono, resampled to ``sample_rate`` (a warning when that
upsamples), trimmed of silence at its ends and checked: unreadable audio, a clip under ``min_seconds`` or over
``max_seconds``, a silent or clipped one, empty text, characters the front end cannot read, and a language
other than ``lang`` are each a ``BadClipError`` naming the file and the transcript
line — or, with ``bad_clips="skip"``, left out and counted in the run; more than ``max_bad_fraction`` of the
clips bad stops the run either way.
"""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch
from torch.utils.data import Dataset

from twinkle_audio.audio import BadClipError, ClipLimits, check, decode, resample
from twinkle_audio.text import FrontEndError, phonemize
from twinkle_audio.text.symbols import NUM_LANGUAGES, NUM_TONES, SYMBOLS
from twinkle_core.data import (
    DataProcessor,
    DataSpec,
    PrepareContext,
    PreparedData,
    Samples,
    data_fingerprint,
    require_exists,
    split_indices,
)
from twinkle_core.types import PositiveFloat, PositiveInt, Probability

AUDIO_SUFFIXES = ("wav", "flac", "ogg", "mp3")
MELO_LANGUAGES = {"ZH": "zh-cn", "ZH_MIX_EN": "zh-cn", "EN": "en", "EN_NEWEST": "en", "ZH-CN": "zh-cn"}
"""MeloTTS's language codes in filelists, and the front end each is."""
_HAN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff]")


@dataclass
class Clip:
    """One usable clip: its phones and audio, and where it came from."""

    key: str
    text: str
    speaker: str
    phones: list[int]
    tones: list[int]
    languages: list[int]
    audio: np.ndarray


class SpeechClips(Dataset):
    """Clips as dicts of tensors: ``phones``, ``tones``, ``languages`` (int64 [L]), ``audio`` (float32 [T]),
    ``speaker`` (int64), and the ``text``."""

    def __init__(self, clips: list[Clip], rows: np.ndarray, speakers: list[str]) -> None:
        """Serve ``clips[rows]``."""
        self.clips, self.rows, self.speaker_ids = clips, rows, {name: i for i, name in enumerate(speakers)}

    def __len__(self) -> int:
        """The number of clips."""
        return len(self.rows)

    def __getitem__(self, i: int) -> dict[str, Any]:
        """Clip ``i``."""
        clip = self.clips[int(self.rows[i])]
        return {"phones": torch.tensor(clip.phones), "tones": torch.tensor(clip.tones),
                "languages": torch.tensor(clip.languages), "audio": torch.from_numpy(clip.audio),
                "speaker": torch.tensor(self.speaker_ids[clip.speaker]), "text": clip.text, "key": clip.key}


def collate(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """Clips padded into a batch: phone-level ``[B, L]`` (0 is the pad), ``audio [B, T]``, their lengths,
    ``speakers [B]``, and the texts and keys."""
    def pad(name: str, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        lengths = torch.tensor([len(s[name]) for s in samples])
        out = torch.zeros(len(samples), int(lengths.max()), dtype=dtype)
        for row, sample in enumerate(samples):
            out[row, :len(sample[name])] = sample[name]
        return out, lengths

    phones, phone_lengths = pad("phones", torch.long)
    audio, audio_lengths = pad("audio", torch.float32)
    return {"phones": phones, "tones": pad("tones", torch.long)[0], "languages": pad("languages", torch.long)[0],
            "phone_lengths": phone_lengths, "audio": audio, "audio_lengths": audio_lengths,
            "speakers": torch.stack([s["speaker"] for s in samples]), "texts": [s["text"] for s in samples],
            "keys": [s["key"] for s in samples]}


class Sentences(Dataset):
    """Sentences to speak (``predict``): each a dict of its ``text``, its ``key`` (``line-N``) and its phone count."""

    def __init__(self, lines: list[tuple[int, str, int]]) -> None:
        """Serve ``(line number, text, phones)`` triples."""
        self.lines = lines

    def __len__(self) -> int:
        """The number of sentences."""
        return len(self.lines)

    def __getitem__(self, i: int) -> dict[str, Any]:
        """Sentence ``i``."""
        number, text, phones = self.lines[i]
        return {"text": text, "key": f"line-{number}", "phones": phones}


def collate_sentences(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """Sentences as a batch: their ``texts`` and ``keys``."""
    return {"texts": [s["text"] for s in samples], "keys": [s["key"] for s in samples]}


class SpeechDataProcessor(DataProcessor):
    """A folder of speech clips with a transcript (see the module docstring)."""

    task = "text_to_speech"
    formats = ("csv", "list", "txt")

    def __init__(self, lang: Literal["zh-cn", "en"] = "zh-cn", sample_rate: PositiveInt = 22050,
                 min_seconds: PositiveFloat = 0.5, max_seconds: PositiveFloat = 15.0,
                 bad_clips: Literal["error", "skip"] = "error", max_bad_fraction: Probability = 0.1,
                 val_fraction: Probability = 0.1, silence_db: PositiveFloat = 40.0) -> None:
        """Declare the parameters (routed by name from the trainer's hyperparameters).

        Args:
            lang: the language of the corpus, and so its front end.
            sample_rate: the rate clips are resampled to (the model's).
            min_seconds: shortest usable clip after trimming. max_seconds: longest.
            bad_clips: ``"error"`` stops at the first bad clip, naming it; ``"skip"`` leaves bad clips out and
                counts them in the run.
            max_bad_fraction: with ``"skip"``, more than this share of bad clips still stops the run.
            val_fraction: the share of clips held out for validation (at least one).
            silence_db: the ends quieter than this under the peak are trimmed; quieter clips are silent.
        """
        super().__init__()
        self.lang, self.sample_rate, self.bad_clips = lang, int(sample_rate), bad_clips
        self.limits = ClipLimits(min_seconds=min_seconds, max_seconds=max_seconds, silence_db=silence_db)
        self.max_bad_fraction, self.val_fraction = max_bad_fraction, val_fraction

    # ------------------------------------------------------------ transcript
    def _transcript(self, uri: str) -> tuple[Any, str, str]:
        """The filesystem, the transcript's path and the corpus folder."""
        fs, path = require_exists(uri, "voice samples")
        path = path.rstrip("/")  # "s3://voice-dataset/zh-cn/" names the folder
        if not fs.isdir(path):
            return fs, path, path.rsplit("/", 1)[0] if "/" in path else ""
        for name in ("metadata.csv", "filelist.txt"):
            if fs.exists(f"{path}/{name}"):
                return fs, f"{path}/{name}", path
        lists = sorted(p for p in fs.ls(path, detail=False) if p.endswith(".list"))
        if lists:
            return fs, lists[0], path
        raise BadClipError(f"'{uri}' has no transcript: add metadata.csv (id|text) or a MeloTTS filelist "
                           "(path|speaker|language|text, as *.list)")

    def _entries(self, fs: Any, transcript: str, folder: str) -> list[tuple[str, str, str, str, str | None]]:
        """``(where, audio path, speaker, text, language)`` per line (language ``None`` when not written)."""
        lines = fs.cat_file(transcript).decode("utf-8-sig").splitlines()
        names = set(fs.find(folder)) if folder else set()
        entries = []
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            where = f"{transcript}:{number}"
            fields = [f.strip() for f in line.split("|")]
            if len(fields) == 4:
                audio, speaker, language, text = fields
                entries.append((where, f"{folder}/{audio}" if folder else audio, speaker or "default", text, language))
            elif len(fields) in (2, 3):
                key, text = fields[0], fields[-1]
                found = next((f"{folder}/{sub}{key}.{ext}" for sub in ("", "wavs/") for ext in AUDIO_SUFFIXES
                              if f"{folder}/{sub}{key}.{ext}" in names), f"{folder}/{key}.wav")
                entries.append((where, found, "default", text, None))
            else:
                raise BadClipError(f"{where}: {len(fields)} fields in {line[:80]!r}; write 'id|text' "
                                   "(metadata.csv) or 'path|speaker|language|text' (a MeloTTS filelist)")
        if not entries:
            raise BadClipError(f"{transcript} lists no clips")
        return entries

    # ----------------------------------------------------------------- clips
    def _clip(self, fs: Any, where: str, path: str, speaker: str, text: str, language: str | None,
              upsampled: list[str]) -> Clip:
        """One clip read and checked (raises ``BadClipError``)."""
        name = path.rsplit("/", 1)[-1]
        at = f"{where} ({name})"
        if not text:
            raise BadClipError(f"{at}: empty text; transcribe it or remove the line")
        if language is not None and MELO_LANGUAGES.get(language.upper(), language.lower()) != self.lang:
            raise BadClipError(f"{at}: language {language!r}, but this corpus is lang={self.lang!r}; train each "
                               "language's clips with its own lang (or fix the filelist)")
        if language is None and (self.lang == "zh-cn") != bool(_HAN.search(text)):
            raise BadClipError(f"{at}: {text[:40]!r} is not {self.lang} text; give lang= the corpus's language")
        try:
            phonemes = phonemize(text, self.lang)
        except FrontEndError as err:
            raise BadClipError(f"{at}: {err}") from None
        if not fs.exists(path):
            raise BadClipError(f"{at}: the audio file {path} is not there")
        samples, rate = decode(fs.cat_file(path), at)
        if rate < self.sample_rate:
            upsampled.append(name)
        audio = check(resample(samples, rate, self.sample_rate), self.sample_rate, self.limits, at)
        return Clip(name, text, speaker, phonemes.phone_ids, phonemes.tones, phonemes.language_ids,
                    np.ascontiguousarray(audio, dtype=np.float32))

    def _clips(self, uri: str) -> tuple[list[Clip], list[tuple[str, str]], list[str], int]:
        """Every clip of the corpus at ``uri`` read and checked: the clips, the bad ones (where, why) — an error
        at the first unless ``bad_clips="skip"`` —, those upsampled, and the corpus's size in bytes."""
        fs, transcript, folder = self._transcript(uri)
        entries = self._entries(fs, transcript, folder)
        clips: list[Clip] = []
        bad: list[tuple[str, str]] = []
        upsampled: list[str] = []
        for where, path, speaker, text, language in entries:
            try:
                clips.append(self._clip(fs, where, path, speaker, text, language, upsampled))
            except BadClipError as err:
                if self.bad_clips == "error":
                    raise BadClipError(f"{err}; or pass bad_clips='skip' to leave bad clips out (counted in the "
                                       "run)") from None
                bad.append((where, str(err)))
        if len(bad) > self.max_bad_fraction * len(entries) or not clips:
            raise BadClipError(f"{len(bad)} of {len(entries)} clips are bad, more than max_bad_fraction="
                               f"{self.max_bad_fraction:g}; the first: " + "; ".join(r for _, r in bad[:3]))
        size = int(sum(fs.size(path) for _, path, *_ in entries if fs.exists(path)))
        return clips, bad, upsampled, size

    def read_samples(self, uri: str, spec: DataSpec, context: PrepareContext | None = None, *,
                     targets: bool = True) -> Samples:
        """Speech a trained voice is scored on or speaks, read with its spec (language, sample rate, speakers).

        With ``targets`` (``evaluate``): every clip of a voice corpus (any transcript format above), checked as
        training clips are; ids are the clips' file names. Without (``predict``): a text file of sentences, one
        per line (empty lines ignored); ids are ``line-N``. A sentence the front end cannot read is a
        ``BadClipError`` naming its line (or, with ``bad_clips="skip"``, left out and counted in
        ``details["skipped"]``).

        Clips of speakers the voice does not have are left out and counted (``details["unseen_speakers"]``).

        Raises:
            BadClipError: no clip of the voice's speakers (named with them), and any bad clip or sentence as above.
        """
        self.lang, self.sample_rate = str(spec.extra["lang"]), int(spec.extra["sample_rate"])  # the voice's
        if not targets:
            return self._sentences(uri)
        clips, bad, _, _ = self._clips(uri)
        speakers = list(spec.extra["speakers"])
        unseen: dict[str, int] = {}
        for clip in clips:
            if clip.speaker not in speakers:
                unseen[clip.speaker] = unseen.get(clip.speaker, 0) + 1
        clips = [c for c in clips if c.speaker in speakers]
        if not clips:
            raise BadClipError(f"'{uri}' has clips only of speaker(s) {', '.join(sorted(unseen))}, which this voice "
                               f"does not have ({', '.join(speakers)}); score it on its own speakers' clips, or "
                               "fine-tune a voice on the new speakers first")
        details = {"clips": len(clips), "bad_clips": len(bad), "bad_clip_reasons": [r for _, r in bad[:20]],
                   "seconds": round(sum(len(c.audio) for c in clips) / self.sample_rate, 2),
                   "unseen_speakers": unseen}
        return Samples(SpeechClips(clips, np.arange(len(clips)), speakers), True, data_fingerprint(uri), uri,
                       [c.key for c in clips], details, collate_fn=collate)

    def _sentences(self, uri: str) -> Samples:
        """The sentences of the text file at ``uri``, each checked by the front end (see ``read_samples``)."""
        fs, path = require_exists(uri, "sentences")
        if fs.isdir(path):
            raise BadClipError(f"'{uri}' is a folder; predict speaks a text file of sentences, one per line")
        lines, bad = [], []
        for number, line in enumerate(fs.cat_file(path).decode("utf-8-sig").splitlines(), 1):
            text = line.strip()
            if not text:
                continue
            try:
                lines.append((number, text, len(phonemize(text, self.lang))))
            except FrontEndError as err:
                if self.bad_clips == "error":
                    raise BadClipError(f"{uri}:{number}: {err}; fix the line, or pass bad_clips='skip' to leave it "
                                       "out (counted)") from None
                bad.append(f"{uri}:{number}: {err}")
        if not lines:
            raise BadClipError(f"'{uri}' holds no sentence to speak; write one per line")
        return Samples(Sentences(lines), False, data_fingerprint(uri), uri, [f"line-{n}" for n, *_ in lines],
                       {"sentences": len(lines), "skipped": len(bad), "skipped_reasons": bad[:20]},
                       collate_fn=collate_sentences)

    def preprocessing(self, spec: DataSpec) -> dict[str, Any]:
        """How text becomes the exported graph's input: the language's front end (phones, tones, languages,
        blanks between phones) at the voice's sample rate; speakers by index."""
        return {"reader": "speech-text", "lang": spec.extra.get("lang"), "sample_rate": spec.extra.get("sample_rate"),
                "speakers": list(spec.extra.get("speakers", [])), "blanks": True}

    def prepare(self, uri: str, context: PrepareContext | None = None) -> PreparedData:
        """Read, check and phonemize every clip, then split off the validation clips."""
        clips, bad, upsampled, size = self._clips(uri)
        if upsampled:
            warnings.warn(f"{len(upsampled)} clip(s) (e.g. {upsampled[0]}) were recorded below {self.sample_rate} Hz "
                          "and upsampled: they hold no sound above their own Nyquist frequency", stacklevel=2)
        speakers = sorted({c.speaker for c in clips})
        train_rows, val_rows = split_indices(len(clips), self.val_fraction, self.context(context).seed)
        seconds = [len(c.audio) / self.sample_rate for c in clips]
        spec = DataSpec(task=self.task, input_shape=(max(len(c.phones) for c in clips),), input_dtype="int64",
                        vocab_size=len(SYMBOLS), class_names=tuple(speakers),
                        extra={"sample_rate": self.sample_rate, "lang": self.lang, "speakers": speakers,
                               "num_tones": NUM_TONES, "num_languages": NUM_LANGUAGES,
                               "max_audio_samples": max(len(c.audio) for c in clips)})
        details = {"clips": len(clips), "train_clips": int(len(train_rows)), "val_clips": int(len(val_rows)),
                   "speakers": speakers, "hours": round(sum(seconds) / 3600, 4),
                   "seconds_min_max": [round(min(seconds), 2), round(max(seconds), 2)],
                   "bad_clips": len(bad), "bad_clip_reasons": [r for _, r in bad[:20]], "upsampled_clips": len(upsampled)}
        return PreparedData(SpeechClips(clips, train_rows, speakers), SpeechClips(clips, val_rows, speakers), spec,
                            data_fingerprint(uri), uri, size, details, collate_fn=collate)
