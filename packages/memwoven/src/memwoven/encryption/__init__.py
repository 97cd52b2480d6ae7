"""Encryption at rest: `EncryptedChatMemory`, `EncryptedVectorMemory` and `EncryptedItemMemory` wrap any backend
with AES-GCM.

Needs the `cryptography` package (`pip install "memwoven[encryption]"`). The wrappers encrypt on the way in and
decrypt on the way out, so the store only ever holds ciphertext, whatever backend it is::

    key = generate_key()  # keep it in a secret store, e.g. an environment variable
    chat = EncryptedChatMemory(open_chat_memory("sqlite:///memory.db"), key=key)
    notes = EncryptedVectorMemory(open_vector_memory("sqlite:///memory.db", collection="notes"), key=key)
    items = EncryptedItemMemory(SQLItemMemory("sqlite:///memory.db"), key=key, id_key=generate_key())

What is encrypted
-----------------
* Chat: each message is stored as a message with the same role whose only field is the metadata entry
  ``{"memwoven_encrypted": <token>}``. The token encrypts the message's whole JSON: content and content parts,
  tool calls and their arguments, `tool_call_id`, `name`, `id`, `created_at`, `metadata`, `extras` (and the role
  again, checked on read, so a changed role is detected too).
* Vectors: each document is stored with the token as its content and empty metadata; the token encrypts its
  content and metadata, and its embedding when `encrypt_embeddings=True`.
* Items: each item is stored with the single value entry ``{"memwoven_encrypted": <token>}``; the token encrypts
  its value (and its namespace and key with `id_key`). Namespace labels and keys are hashed with `id_key`, label by
  label, so that prefixes still work; filters, key ranges and the order are then computed by the wrapper after
  decryption. See `memwoven.encryption.items` for the layout and what it costs.

What the store still sees: the role and position of every message and how many there are, the approximate
size of every value, versions, write times and item expiry, the embeddings (unless `encrypt_embeddings`), the
depth of item namespaces and how many items each holds, and the session, message and document ids, namespace
labels and item keys unless `id_key` is given (then it sees their keyed hashes, HMAC-SHA256). Message ids stay
visible to the inner memory (as given, or hashed within their session) so that it keeps them unique and its
appends idempotent (CM10); an id changed in the store is detected on read.

Tokens and tampering
--------------------
A token is ``mwe2:<key id>:<base64url(nonce || ciphertext || tag)>``: AES-GCM with a fresh random 96-bit nonce per
value. The associated data binds it to its kind (chat, vector or item), its key id and the id it is stored under
(the session id, the collection name and the document id, or the item's stored namespace and key), so a token
copied to another session, document, collection or item does not decrypt. Any value that does not decrypt, or is
not a token at all, raises `CorruptMemoryError` naming the session (or document, or item); nothing is ever
returned unverified. An embedding kept in the clear is covered by a sketch in its token (its largest magnitude
and each value to 1/127 of it): one changed in the store by more than that rounding raises `CorruptMemoryError`
too (tokens written before 2026-11-29 hold no sketch, and their embeddings go unchecked). The binding is to
the session, not to a position in it: someone who can write to the store can still drop, repeat or reorder one
session's messages, or roll a session back to an older state, without being detected; they cannot read, forge,
alter or move one.

The collection is the wrapper's `collection`: by default the inner memory's collection name (its `collection`
attribute; for a `FileVectorMemory`, the file's name without `.npz`, as `open_vector_memory` names it). Only the
name counts, not the database, table prefix or server, so a collection copied under its own name (`memwoven
migrate`) still decrypts, and one renamed in storage needs `collection=<old name>`. An `InMemoryVectorMemory`
has no name: its tokens are bound to none unless `collection=` is given (nor are those of another backend
without a `collection` name, which logs a warning).

Keys and rotation
-----------------
`key` is one key or a list of keys, oldest first: values are written with the last one and read with whichever
one wrote them (its id is in the token). To rotate, append a new key; `reencrypt` rewrites old values with it,
after which the old key can be dropped. A key is 16, 24 or 32 random bytes (AES-128/192/256), raw or encoded
in URL-safe base64 as `generate_key()` returns it. A key id is a keyed hash of the key, so it reveals nothing.
Use a key for at most 2**32 values: nonces are random.

Hashed ids
----------
With `id_key` (a separate key, never rotated: changing it loses access to every session), session and document
ids are stored as their HMAC-SHA256, so the store does not reveal them. Equal ids hash equally: the store can
tell that two sessions, documents or item keys share an id (within a kind and across kinds, under one `id_key`),
though not what it is; give each kind, or each tenant, its own `id_key` where that matters. The original id is
kept inside each encrypted value, which is how `sessions()` and `ids()` still return the original ids — but they
then read and decrypt every session (its whole history) or every document, O(everything stored), instead of one
listing.
A stored session whose id is shaped like a hash but does not open with this key and `id_key` (a plain session
named like one, another `id_key`'s or key's session, or damage) is left out of `sessions()` with a logged
warning rather than hiding every other session; `unlisted_sessions()` returns each such stored id with why.

Filters
-------
Metadata is encrypted, so a backend cannot filter on it: `search(..., filter=...)` filters after decryption.
The wrapper asks the backend for a growing page of the best hits until `top_k` of them match, so a selective
filter costs a scan of the ranked hits down to the last match, up to the whole collection. With
`encrypt_embeddings=True` the backend cannot rank either, and every search reads and decrypts the whole
collection and ranks it in process: meant for small collections only, and off by default.
"""

from memwoven.encryption._keys import MARKER, KeyLike, Keyring, generate_key
from memwoven.encryption.chat import EncryptedChatMemory
from memwoven.encryption.items import EncryptedItemMemory
from memwoven.encryption.vector import EncryptedVectorMemory

__all__ = [
    "MARKER",
    "EncryptedChatMemory",
    "EncryptedItemMemory",
    "EncryptedVectorMemory",
    "KeyLike",
    "Keyring",
    "generate_key",
]
