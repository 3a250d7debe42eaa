"""``verify_data``: check data against an expected fingerprint, naming changed, added and removed files.

The fingerprint is documented in ``twinkle_core.data.fingerprint`` (a file's MD5; a folder's MD5 over
sorted ``relative path, size, content MD5`` lines). Every fingerprint a run records also saves its manifest
(the per-file lines) under ``<TWINKLE_HOME>/manifests/<md5>.json``, so a later mismatch can say exactly which
files differ from what that run trained on.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from twinkle_core.data.errors import DataError
from twinkle_core.data.fingerprint import Manifest, scan
from twinkle_core.store.atomic import atomic_write_text
from twinkle_core.uris import filesystem, join, twinkle_home


class DataVerificationError(DataError):
    """Data whose fingerprint differs from the expected one."""


@dataclass
class VerifyResult:
    """The outcome of ``verify_data``.

    Attributes:
        uri: the data checked.
        md5: its fingerprint (hex).
        files: how many files it holds.
        expected_md5: the expected fingerprint, if one was given.
        changed: files present in both with different size or content.
        added: files only in the data now.
        removed: files only in the expected data.
    """

    uri: str
    md5: str
    files: int
    expected_md5: str | None = None
    changed: list[str] = field(default_factory=list)
    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Whether the data matches the expectation (always true without one)."""
        return self.expected_md5 is None or self.expected_md5 == self.md5


def _manifest_url(md5: str, home: str | None) -> str:
    return join(home or twinkle_home(), "manifests", f"{md5}.json")


def save_manifest(manifest: Manifest, home: str | None = None) -> str:
    """Store ``manifest`` under its fingerprint (idempotent); returns the fingerprint."""
    url = _manifest_url(manifest.md5, home)
    fs, path = filesystem(url)
    if not fs.exists(path):
        atomic_write_text(url, json.dumps({k: list(v) for k, v in sorted(manifest.files.items())}, indent=1))
    return manifest.md5


def save_data_manifest(home: str, uri: str, prepared: Any) -> None:
    """Keep the manifest of the data a run trained on, unless already stored (or the data is an index)."""
    if not prepared.fingerprint.startswith("md5:"):  # a processor's own kind of fingerprint: no file manifest
        return
    md5 = prepared.fingerprint.removeprefix("md5:")
    fs, path = filesystem(_manifest_url(md5, home))
    if prepared.details.get("index") or fs.exists(path):
        return
    if prepared.manifest is not None:  # fingerprinted while the processor read the data: no second read
        if prepared.manifest.md5 == md5:
            save_manifest(prepared.manifest, home)
        return
    scanned = scan(uri, tuple(prepared.details.get("fingerprint_exclude", ())))
    if scanned.md5 == md5:
        save_manifest(scanned, home)


def load_manifest(md5: str, home: str | None = None) -> dict[str, tuple[int, str]] | None:
    """The stored manifest of fingerprint ``md5``, or ``None`` if none was saved."""
    fs, path = filesystem(_manifest_url(md5, home))
    if not fs.exists(path):
        return None
    with fs.open(path, "r") as handle:
        return {k: (int(v[0]), str(v[1])) for k, v in json.load(handle).items()}


def verify_data(uri: str, expected_md5: str | None = None, home: str | None = None) -> VerifyResult:
    """Fingerprint ``uri``; with ``expected_md5``, raise if it differs, naming the files that changed.

    Raises:
        DataVerificationError: the fingerprint differs; lists changed, added and removed files when the
            expected manifest is known (any run that fingerprinted that data saved it).
    """
    scanned = scan(uri)
    md5 = save_manifest(scanned, home)
    manifest = scanned.files
    result = VerifyResult(uri, md5, len(manifest), expected_md5.removeprefix("md5:") if expected_md5 else None)
    if result.ok:
        return result
    expected = load_manifest(result.expected_md5, home)  # type: ignore[arg-type]
    if expected is None:
        raise DataVerificationError(
            f"data '{uri}' has fingerprint {md5}, not the expected {result.expected_md5}; no manifest of the "
            "expected data is stored, so the changed files cannot be named (check the data's source and version)"
        )
    result.changed = sorted(k for k in manifest.keys() & expected.keys() if manifest[k] != expected[k])
    result.added = sorted(manifest.keys() - expected.keys())
    result.removed = sorted(expected.keys() - manifest.keys())
    parts = [f"{label}: {', '.join(names[:10])}{' ...' if len(names) > 10 else ''}"
             for label, names in (("changed", result.changed), ("added", result.added), ("removed", result.removed))
             if names]
    raise DataVerificationError(
        f"data '{uri}' does not match the expected fingerprint {result.expected_md5} (it is {md5}); "
        + "; ".join(parts) + ". Restore those files or update expected_md5"
    )


def describe(result: VerifyResult) -> dict[str, Any]:
    """A JSON-ready summary."""
    return {"uri": result.uri, "md5": result.md5, "files": result.files, "expected_md5": result.expected_md5,
            "ok": result.ok}
