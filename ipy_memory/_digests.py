"""hashlib's digests without importing hashlib, which loads OpenSSL first (~2.5 ms of a new
process's start): CPython's builtin modules compute the same digests; hashlib's where one is missing."""

try:
    from _sha1 import sha1
except ImportError:
    from hashlib import sha1
try:
    from _sha2 import sha256              # Python 3.12 and later
except ImportError:
    try:
        from _sha256 import sha256
    except ImportError:
        from hashlib import sha256
try:
    from _blake2 import blake2b
except ImportError:
    from hashlib import blake2b

__all__ = ["blake2b", "bulk_sha256", "sha1", "sha256"]


def bulk_sha256():
    """OpenSSL's SHA-256 (the same digests, ~2.5x faster where the CPU has SHA instructions), for a
    bulk write to switch to once it is long enough to pay for loading OpenSSL (~2 ms); the builtin
    one where OpenSSL's is missing or refused."""
    try:
        from _hashlib import openssl_sha256
        openssl_sha256(b"")              # (refused under some FIPS settings: ValueError)
        return openssl_sha256
    except Exception:  # noqa: BLE001  (ImportError, ValueError: keep the builtin one)
        return sha256
