"""What ``twinkle doctor`` checks for twinkle-audio: soundfile's libsndfile (every clip is decoded with it) and
espeak-ng (English words the CMU dictionary lacks, and the sample speech the guides generate)."""

from __future__ import annotations

import shutil
import subprocess

from twinkle_core.doctor import Finding


def libsndfile() -> Finding:
    """soundfile imports and finds libsndfile (bundled by its platform wheel, or the system's)."""
    try:
        import soundfile
    except OSError as err:  # soundfile's pure wheel on a machine without libsndfile
        return Finding("missing", f"soundfile cannot load libsndfile: {err}",
                       fix="pip install --force-reinstall --only-binary=:all: soundfile (its platform wheel bundles "
                           "libsndfile), or apt-get install libsndfile1")
    except ImportError as err:
        return Finding("missing", f"soundfile is not installed: {err}", fix="pip install twinkle-audio")
    return Finding("ok", f"libsndfile {soundfile.__libsndfile_version__} (soundfile {soundfile.__version__})")


def espeak_ng() -> Finding:
    """espeak-ng on PATH, and its version."""
    path = shutil.which("espeak-ng")
    if path is None:
        return Finding("missing", "espeak-ng is not on PATH: MelOTTS spells English words the CMU dictionary lacks "
                                  "with it, and the sample voices are spoken by it", fix="apt-get install espeak-ng")
    said = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30)
    version = (said.stdout.strip().splitlines() or ["(no version)"])[0].split("  Data at:")[0].strip()
    if said.returncode != 0:
        return Finding("missing", f"{path} fails: {said.stderr.strip()[-200:]}", fix="apt-get install --reinstall espeak-ng")
    return Finding("ok", f"{path}: {version}")
