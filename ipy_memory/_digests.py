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

__all__ = ["blake2b", "sha1", "sha256"]
